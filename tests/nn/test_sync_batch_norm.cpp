// SyncBatchNorm and convert_sync_batchnorm in one process (nn/parallel/sync_batch_norm.h); the
// collectives between real processes are tested under mpirun in tests/dist.
//   * With a loopback group of 2 (its all_gather gives this process's tensor as both rows, as if a
//     second process held the same images), the results are those of BatchNorm2d on the batch
//     written twice: output, running statistics, dx; the parameters' gradients are half of it
//     (this process's share).
//   * In a world of one, in eval mode, it is BatchNorm2d exactly.
//   * convert_sync_batchnorm keeps names, tensors (the same ones), values, modes and frozen
//     parameters; a model's own handles (ResNet's members, a Sequential's list) reach the
//     replacements.
//   * Bad input: the messages name the class and the problem.
#include <cstring>

#include "models/resnet.h"
#include "nn/parallel/sync_batch_norm.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;

namespace {

/// A process group of 2 that is one process: all_gather writes the input into both rows; the
/// other collectives are not used here. backend "nccl" makes it claim CUDA buffers.
class LoopbackGroup : public dist::ProcessGroup {
 public:
  explicit LoopbackGroup(std::string backend = "mpi")
      : dist::ProcessGroup(0, 2, 0), backend_(std::move(backend)) {}
  std::string backend() const override { return backend_; }
  std::unique_ptr<dist::Work> all_reduce_async(dist::Buffer, dist::ReduceOp) override {
    fail("LoopbackGroup: all_reduce is not used");
  }
  void broadcast(dist::Buffer, int) override { fail("LoopbackGroup: broadcast is not used"); }
  void all_gather(dist::Buffer in, dist::Buffer out) override {
    check("all_gather", in, &out, 2);
    const size_t bytes = static_cast<size_t>(in.count) * dtype_size(in.dtype);
    std::memcpy(out.data, in.data, bytes);
    std::memcpy(static_cast<char*>(out.data) + bytes, in.data, bytes);
    ++gathers;
  }
  void reduce_scatter(dist::Buffer, dist::Buffer, dist::ReduceOp) override {
    fail("LoopbackGroup: reduce_scatter is not used");
  }
  void barrier() override {}
  [[noreturn]] void abort(int) override { std::abort(); }
  int gathers = 0;

 private:
  std::string backend_;
};

/// rand64's normal numbers (scale N(0, 1) + shift) as a dtype, not requiring grad.
Tensor data(const Dims& shape, uint64_t seed, DType dtype = kFloat32, double scale = 1.0,
            double shift = 0.0) {
  return rand64(shape, seed, scale, shift).to(dtype).detach();
}

/// Random weight, bias and running statistics, the same for every seed.
void randomize(nn::BatchNorm2d& bn, DType dtype, uint64_t seed) {
  bn.to(dtype);
  NoGradGuard ng;
  bn.weight.copy_(rand64({bn.num_features}, seed, 1.0, 1.0).to(dtype));
  bn.bias.copy_(rand64({bn.num_features}, seed + 1).to(dtype));
  bn.running_mean.copy_(rand64({bn.num_features}, seed + 2).to(dtype));
  bn.running_var.copy_((ops::abs(rand64({bn.num_features}, seed + 3)) + 0.5).to(dtype));
}

}  // namespace

TEST_CASE(
    "SyncBatchNorm: over a loopback group of 2 it is BatchNorm2d on the batch written twice") {
  for (DType dt : {kFloat32, kFloat64}) {
    INFO("dtype " << dtype_name(dt));
    const double tol = dt == kFloat64 ? 1e-12 : 2e-6;
    LoopbackGroup group;
    nn::SyncBatchNorm sync(3, 1e-5, 0.1, true, true, &group);
    nn::BatchNorm2d whole(3);
    randomize(sync, dt, 10);
    randomize(whole, dt, 10);
    for (int step = 0; step < 2; ++step) {  // the running statistics move twice
      const Tensor x = data({4, 3, 2, 5}, 20 + step, dt, 2.0, 0.5).requires_grad_();
      const Tensor r = data({4, 3, 2, 5}, 30 + step, dt);
      const Tensor x2 = ops::cat({x, x}, 0).detach().requires_grad_();
      sync.zero_grad();
      whole.zero_grad();
      const Tensor y = sync(x), y2 = whole(x2);
      ops::sum(y * r).backward();
      ops::sum(y2 * ops::cat({r, r}, 0)).backward();
      check_close(y, y2.narrow(0, 0, 4), tol, tol);
      check_close(x.grad(), x2.grad().narrow(0, 0, 4), tol, tol);
      // the parameters' gradients: this process's share, half of the whole batch's
      check_close(sync.weight.grad() * 2.0, whole.weight.grad(), tol, tol);
      check_close(sync.bias.grad() * 2.0, whole.bias.grad(), tol, tol);
      check_close(sync.running_mean, whole.running_mean, tol, tol);
      check_close(sync.running_var, whole.running_var, tol, tol);  // unbiased by 80 / 79
    }
    CHECK(sync.num_batches_tracked.item<int64_t>() == 2);
    CHECK(group.gathers == 4);  // one per forward and one per backward
    // Without x's gradient, backward needs no collective (the parameters' are this process's).
    ops::sum(sync(data({4, 3, 2, 5}, 40, dt))).backward();
    CHECK(group.gathers == 5);
    // eval: the running statistics, no collective, BatchNorm2d's output exactly
    sync.eval();
    whole.eval();
    {
      NoGradGuard ng;
      whole.running_mean.copy_(sync.running_mean);
      whole.running_var.copy_(sync.running_var);
    }
    const Tensor xe = data({2, 3, 2, 5}, 50, dt);
    check_close(sync(xe), whole(xe), 0, 0);
    CHECK(group.gathers == 5);
  }
}

TEST_CASE("SyncBatchNorm: in a world of one it is BatchNorm2d exactly, in training and eval") {
  nn::SyncBatchNorm sync(3);  // the world's group
  nn::BatchNorm2d plain(3);
  randomize(sync, kFloat32, 60);
  randomize(plain, kFloat32, 60);
  CHECK(sync.type_name() == "SyncBatchNorm");
  for (bool training : {true, false}) {
    sync.train(training);
    plain.train(training);
    const Tensor x = data({3, 3, 4, 4}, 70, kFloat32).requires_grad_();
    const Tensor x2 = x.detach().requires_grad_();
    sync.zero_grad();
    plain.zero_grad();
    ops::sum(ops::pow(sync(x), 2.0)).backward();
    ops::sum(ops::pow(plain(x2), 2.0)).backward();
    check_close(x.grad(), x2.grad(), 0, 0);
    check_close(sync.weight.grad(), plain.weight.grad(), 0, 0);
    check_close(sync.running_var, plain.running_var, 0, 0);
  }
  // any number of dims from 2, as PyTorch's
  const Tensor x3 = data({5, 3, 7}, 80, kFloat32);
  sync.train();
  check_close(sync(x3), ops::batch_norm(x3, Tensor(), Tensor(), sync.weight, sync.bias, true), 1e-6,
              1e-6);
}

TEST_CASE("convert_sync_batchnorm: the same names, tensors and values, reached by the model") {
  models::ResNetConfig c;
  c.depth = 8;
  c.channels = 1;
  c.num_classes = 3;
  c.width = 4;
  c.image_h = c.image_w = 8;
  Generator g1(5), g2(5);
  auto model = std::make_shared<models::ResNet>(c, g1);
  models::ResNet reference(c, g2);
  model->fc->weight.requires_grad_(false);  // frozen parameters stay frozen
  model->layer1->eval();                    // and modes stay as they were
  const nn::NamedTensors before = model->state_dict();
  auto* old_bn1 = model->bn1.get();

  std::shared_ptr<nn::Module> converted = nn::convert_sync_batchnorm(model);
  CHECK(converted == model);
  const nn::NamedTensors after = model->state_dict();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    INFO(before[i].first);
    CHECK(after[i].first == before[i].first);
    CHECK(after[i].second.impl_ptr() == before[i].second.impl_ptr());  // shared, not copied
  }
  int64_t syncs = 0, plain = 0;
  for (auto& [name, m] : model->named_modules()) {
    syncs += dynamic_cast<nn::SyncBatchNorm*>(m) != nullptr;
    plain += dynamic_cast<nn::BatchNorm2d*>(m) && !dynamic_cast<nn::SyncBatchNorm*>(m);
  }
  CHECK(syncs == 9);  // bn1, 2 in each of the 3 blocks, 1 in each of the 2 downsamples
  CHECK(plain == 0);
  auto bn1 = std::dynamic_pointer_cast<nn::SyncBatchNorm>(model->child("bn1"));
  REQUIRE(bn1 != nullptr);
  CHECK(bn1.get() != old_bn1);
  CHECK(bn1->weight.impl_ptr() == model->bn1->weight.impl_ptr());
  auto block_bn = model->layer1->child("0")->child("bn1");
  CHECK(!block_bn->is_training());
  CHECK(bn1->is_training());
  CHECK(!model->fc->weight.requires_grad());
  CHECK(model->summary().find("bn1: SyncBatchNorm(4, eps=1e-05") != std::string::npos);

  // ResNet::forward calls its members (the old BatchNorm2d objects): they forward to the
  // replacements, whose hooks see the call, and the output is the unconverted model's.
  int calls = 0;
  bn1->register_forward_hook([&calls](nn::Module&, const Tensor&, const Tensor&) {
    ++calls;
    return Tensor();
  });
  model->train();
  reference.train();
  model->layer1->eval();
  reference.layer1->eval();
  const Tensor x = data({4, 1, 8, 8}, 90, kFloat32);
  check_close((*model)(x), reference(x), 0, 0);
  CHECK(calls == 1);
  model->eval();  // reaches the replacements, which are in the tree
  CHECK(!bn1->is_training());

  // A Sequential's list, and a BatchNorm2d alone (its replacement is returned).
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 2, 3), std::make_shared<nn::BatchNorm2d>(2)});
  nn::convert_sync_batchnorm(seq);
  CHECK(seq->child("1")->type_name() == "SyncBatchNorm");
  int seq_calls = 0;
  seq->child("1")->register_forward_hook([&seq_calls](nn::Module&, const Tensor&, const Tensor&) {
    ++seq_calls;
    return Tensor();
  });
  (*seq)(x);
  CHECK(seq_calls == 1);
  auto alone = std::make_shared<nn::BatchNorm2d>(5, 1e-3, std::nullopt, false, false);
  auto made = std::dynamic_pointer_cast<nn::SyncBatchNorm>(nn::convert_sync_batchnorm(alone));
  REQUIRE(made != nullptr);
  CHECK(made->extra_repr() == alone->extra_repr());
  CHECK(made->state_dict().empty());
  // Converting twice changes nothing.
  CHECK(nn::convert_sync_batchnorm(made) == made);
}

TEST_CASE("SyncBatchNorm: bad input names the class and what is wrong") {
  CHECK_ERROR_CONTAINS(nn::convert_sync_batchnorm(nullptr), "convert_sync_batchnorm",
                       "the module is null");
  nn::SyncBatchNorm bn(4);
  CHECK_ERROR_CONTAINS(bn(ops::zeros({2, 3, 2, 2})), "SyncBatchNorm(4): x has 3 channels",
                       "[2, 3, 2, 2]");
  CHECK_ERROR_CONTAINS(bn(ops::zeros({4})), "SyncBatchNorm: expected x [B, C, ...]", "[4]");
  CHECK_ERROR_CONTAINS(nn::SyncBatchNorm(0), "SyncBatchNorm: num_features must be positive");
  CHECK_ERROR_CONTAINS(bn(ops::zeros({1, 4, 1, 1})), "more than 1 value per channel");
  // A group for GPU buffers given CPU tensors.
  LoopbackGroup gpu("nccl");
  nn::SyncBatchNorm on_gpu_group(4, 1e-5, 0.1, true, true, &gpu);
  CHECK_ERROR_CONTAINS(on_gpu_group(ops::zeros({2, 4, 2, 2})), "SyncBatchNorm: x is on cpu",
                       "(nccl, 2 processes) reduces CUDA tensors", "dist::group_for");
  // Across the loopback's two "processes" one value per channel each is enough (2 in all).
  LoopbackGroup group;
  nn::SyncBatchNorm two(2, 1e-5, 0.1, true, true, &group);
  const Tensor one = ops::reshape(ops::arange(0, 2, 1), {1, 2, 1, 1});
  check_close(two(one), {0.0, 0.0}, 1e-6, 0);  // each channel's two equal values: x - mean = 0
  // A hook that gathers the wrong shape is named.
  ops::BatchNormSync bad;
  bad.all_gather = [](const Tensor& t) { return t; };
  CHECK_ERROR_CONTAINS(ops::batch_norm(ops::ones({2, 2, 1, 1}), Tensor(), Tensor(), Tensor(),
                                       Tensor(), true, 0.1, 1e-5, bad),
                       "BatchNormSync::all_gather must return [processes, 5]", "got [5]");
}
