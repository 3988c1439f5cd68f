// The CPU backend: the reference implementation of backends/backend.h, on OpenBLAS + OpenMP.
// One .cpp file per kernel family.
#pragma once
#include "backends/backend.h"

namespace vitrine::cpu {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return kCPU; }
  // memory.cpp
  StoragePtr allocate(size_t nbytes) override;
  MemoryStats memory_stats() override;
  void reset_peak_memory_stats() override;
  void copy(const Strided& src, const Strided& dst) override;
  void to_host(const void* src, void* host_dst, size_t nbytes) override;
  void from_host(const void* host_src, void* dst, size_t nbytes) override;
  void fill(const Strided& dst, double value) override;
  void arange(const Strided& dst, double start, double step) override;
  // random.cpp
  void uniform(const Strided& dst, uint64_t seed, uint64_t offset, double lo, double hi) override;
  void normal(const Strided& dst, uint64_t seed, uint64_t offset, double mean, double std) override;
  void randint(const Strided& dst, uint64_t seed, uint64_t offset, int64_t lo, int64_t hi) override;
  // elementwise.cpp
  void unary(UnaryOp op, const Strided& x, const Strided& y, double alpha, double beta) override;
  void binary(BinaryOp op, const Strided& a, const Strided& b, const Strided& y) override;
  void where(const Strided& cond, const Strided& a, const Strided& b, const Strided& y) override;
  // reduce.cpp
  void reduce(ReduceOp op, const Strided& x, const Strided& y) override;
  void tree_sum(const Strided& parts) override;
  // gemm.cpp
  void gemm(const Strided& a, const Strided& b, const Strided& c, bool accumulate) override;
  void gemm_fused(const Strided& a, const Strided& b, const Strided& c,
                  const GemmEpilogue& ep) override;
  bool gemm_fixed_rows(int64_t K, int64_t N, DType dtype) const override;
  // index.cpp
  void index_select(const Strided& x, int dim, const Strided& index, const Strided& y) override;
  void index_add(const Strided& y, int dim, const Strided& index, const Strided& src) override;
  void gather(const Strided& x, int dim, const Strided& index, const Strided& y) override;
  void scatter_add(const Strided& y, int dim, const Strided& index, const Strided& src) override;
  // softmax.cpp
  void softmax(const Strided& x, const Strided& y, bool log) override;
  void softmax_backward(const Strided& y, const Strided& dy, const Strided& dx, bool log) override;
  // layer_norm.cpp
  void layer_norm(const Strided& x, const Strided& w, const Strided& b, double eps,
                  const Strided& y, const Strided& mean, const Strided& rstd) override;
  void layer_norm_backward(const Strided& x, const Strided& w, const Strided& mean,
                           const Strided& rstd, const Strided& dy, const Strided& dx,
                           const Strided& dw, const Strided& db) override;
  // rms_norm.cpp
  void rms_norm(const Strided& x, const Strided& w, double eps, const Strided& y,
                const Strided& rstd) override;
  void rms_norm_backward(const Strided& x, const Strided& w, const Strided& rstd, const Strided& dy,
                         const Strided& dx, const Strided& dw) override;
  // batch_norm.cpp
  void batch_norm_stats(const Strided& x, const Strided& mean, const Strided& var) override;
  void batch_norm_backward_reduce(const Strided& x, const Strided& mean, const Strided& dy,
                                  const Strided& sum_dy, const Strided& sum_dy_xmu) override;
  void channel_affine(const Strided& x, const Strided& a, const Strided& z, const Strided& zc,
                      const Strided& d, const Strided& y) override;
  void channel_affine_relu(const Strided& x, const Strided& a, const Strided& d, const Strided& z,
                           const Strided& y) override;
  // recurrent.cpp
  bool rnn_cell(RnnCell cell, const Strided& gates, const Strided& hidden, const Strided& prev,
                const Strided& saved, const Strided& h, const Strided& c) override;
  bool rnn_cell_backward(RnnCell cell, const Strided& saved, const Strided& prev,
                         const Strided& out, const Strided& dh, const Strided& dc,
                         const Strided& dgates, const Strided& dhidden,
                         const Strided& dprev) override;
  // cross_entropy.cpp
  void cross_entropy(const Strided& logits, const Strided& target, int64_t ignore_index,
                     double label_smoothing, const Strided& loss) override;
  void cross_entropy_backward(const Strided& logits, const Strided& target, int64_t ignore_index,
                              double label_smoothing, const Strided& dloss,
                              const Strided& dlogits) override;
  // attention.cpp
  void attention(const Strided& qkv, double scale, const Strided& probs,
                 const Strided& out) override;
  void attention_backward(const Strided& qkv, const Strided& probs, const Strided& dout,
                          double scale, const Strided& dqkv) override;
  void attention_probs(const Strided& qkv, double scale, const Strided& probs) override;
  void attention_apply(const Strided& qkv, const Strided& probs, const Strided& out) override;
  void attention_apply_backward(const Strided& qkv, const Strided& probs, const Strided& dout,
                                const Strided& dprobs, const Strided& dqkv) override;
  void attention_probs_backward(const Strided& qkv, const Strided& probs, const Strided& dprobs,
                                double scale, const Strided& dqkv) override;
  // flash_attention.cpp
  bool flash_attention(const Strided& qkv, double scale, bool causal, const Strided& out,
                       const Strided& lse) override;
  bool flash_attention_backward(const Strided& qkv, const Strided& out, const Strided& dout,
                                const Strided& lse, double scale, bool causal,
                                const Strided& dqkv) override;
  // conv.cpp
  void im2col(const Strided& x, const Strided& cols, const ConvGeometry& g) override;
  // conv_batched.cpp
  bool conv2d_batched(const Strided& x, const Strided& w, const Strided& bias, const Strided& y,
                      const ConvGeometry& g) override;
  bool conv2d_batched_add_relu(const Strided& x, const Strided& w, const Strided& bias,
                               const Strided& residual, bool relu, const Strided& y,
                               const ConvGeometry& g) override;
  bool conv2d_batched_backward(const Strided& x, const Strided& w, const Strided& dy,
                               const Strided& dx, const Strided& dw,
                               const ConvGeometry& g) override;
  // pool.cpp
  bool max_pool2d(const Strided& x, const Strided& values, const Strided& indices,
                  const ConvGeometry& g) override;
  // conv_depthwise.cpp
  bool depthwise_conv2d(const Strided& x, const Strided& w, const Strided& bias, const Strided& y,
                        const ConvGeometry& g) override;
  bool depthwise_conv2d_backward(const Strided& x, const Strided& w, const Strided& dy,
                                 const Strided& dx, const Strided& dw,
                                 const ConvGeometry& g) override;
  void col2im(const Strided& cols, const Strided& dx, const ConvGeometry& g) override;
  // interpolate.cpp
  void interpolate(const Strided& x, const Strided& y, const InterpGeometry& g) override;
  void interpolate_backward(const Strided& dy, const Strided& dx, const InterpGeometry& g) override;
  // optim.cpp
  void adam_step(const Strided& param, const Strided& grad, const Strided& exp_avg,
                 const Strided& exp_avg_sq, const AdamStep& o) override;
  void sgd_step(const Strided& param, const Strided& grad, const Strided& momentum_buf,
                const SgdStep& o) override;
};

}  // namespace vitrine::cpu
