// ZeRO stage 1 (optimizer state sharding) for Adam and AdamW, as llm.c does it: the trainable
// parameters, laid end to end, form one flat vector of P elements (padded to a multiple of the
// world's size N); rank r owns the slice [r S, (r+1) S), S = P / N. A step:
//   1. every rank's gradients go into a flat buffer, which is reduce-scattered (average): rank r
//      receives the averaged gradient of its slice only;
//   2. with max_grad_norm, the global norm is the square root of the all-reduced sum of each
//      slice's squares, and the slice is scaled as clip_grad_norm_ would;
//   3. rank r runs the Adam(W) update on its slice, with exp_avg and exp_avg_sq of S elements
//      (instead of P: the optimizer's memory per rank falls by N);
//   4. the updated slices are all-gathered, and every parameter is rewritten from them.
// The result equals DistributedDataParallel + Adam(W) to float32 rounding. Unlike Adam, a
// trainable parameter without a gradient counts as a zero gradient (its slice may span ranks).
// Use it without DistributedDataParallel (it reduces the gradients itself); start every rank
// from the same weights (nn::broadcast_state, ddp.h).
//
// state_tensors() and load_state() use Adam's format with whole tensors (gathered from the
// slices; both are collectives: every rank must call them), so a checkpoint written with it
// resumes with plain Adam(W) and the other way round.
#pragma once
#include <vector>

#include "backends/dist/process_group.h"
#include "nn/optim/adam.h"

namespace vitrine::nn {

class ZeroAdam : public optim::Optimizer {
 public:
  /// decoupled: AdamW's weight decay (else Adam's L2 in the gradient). max_grad_norm: 0 = no
  /// clipping. group: the world's group for the parameters' device by default.
  ZeroAdam(std::vector<optim::ParamGroup> groups, const optim::AdamOptions& options, bool decoupled,
           double max_grad_norm = 0, dist::ProcessGroup* group = nullptr);

  std::string type_name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  using optim::Optimizer::step;
  void step() override;
  NamedTensors state_tensors() const override;
  nlohmann::json state_json() const override;
  void load_state(const NamedTensors& tensors, const nlohmann::json& json) override;

  /// Elements of the flat parameter vector this rank updates (S), and in all (P, padded).
  int64_t shard_size() const { return shard_; }
  int64_t total_size() const { return total_; }
  /// Bytes of optimizer state this rank holds (exp_avg and exp_avg_sq of its slice).
  int64_t state_bytes() const;

 private:
  struct Segment {  // the part of parameter (g, i) in this rank's slice
    size_t g, i;
    int64_t param_offset, shard_offset, length;
  };
  /// A state slot ([S], this rank's slice) gathered from every rank: the whole flat vector.
  Tensor gather_state(const Tensor& slot) const;

  dist::ProcessGroup* group_;
  double beta1_, beta2_, eps_, max_grad_norm_;
  bool decoupled_;
  DType dtype_;
  Device device_;
  std::vector<std::vector<int64_t>> offsets_;  // [g][i]: the parameter's start in the flat vector
  int64_t total_ = 0, shard_ = 0;
  std::vector<Segment> segments_;
  Tensor exp_avg_, exp_avg_sq_;  // [S]
  int64_t steps_ = 0;
};

}  // namespace vitrine::nn
