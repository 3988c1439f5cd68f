// Data parallel across processes (backends/dist, nn/parallel): ctest runs each case under
// `mpirun --oversubscribe -np 2` with one OpenMP thread per rank (tests/CMakeLists.txt); run
// alone, a case sees a world of one and checks what it can.
//   * the collectives' values on float32, float64 and int64 buffers;
//   * a small ViT after K steps: 2 ranks with global batch B (B/2 each) hold the parameters of
//     1 process with batch B to float32 summation order (max relative difference <= 1e-5), with
//     DistributedDataParallel and with ZeRO-1, with and without gradient accumulation (no_sync),
//     with one bucket and with many;
//   * SyncBatchNorm on each rank's share of a batch (unequal shares) gives what batch norm on the
//     whole batch gives in one process: output, running statistics, dx, and dweight and dbias
//     summed over the ranks (float32 to 1e-5, float64 to 1e-12); in eval, BatchNorm2d's output;
//   * a small ResNet converted to SyncBatchNorm, under DDP, after K SGD steps holds the weights
//     and running statistics of 1 process with the whole batch (1e-5); without the conversion it
//     does not (each rank normalises by its own images' statistics);
//   * the loader's shards across the ranks: disjoint, covering, equal, changing with the epoch;
//   * metrics summed across ranks equal those of one process on the whole data.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <set>
#include <string>

#include "explain/tiny_vit.h"
#include "models/resnet.h"
#include "models/vit.h"
#include "nn/data/loader.h"
#include "nn/optim/adam.h"
#include "nn/optim/clip.h"
#include "nn/optim/sgd.h"
#include "nn/parallel/collectives.h"
#include "nn/parallel/ddp.h"
#include "nn/parallel/sync_batch_norm.h"
#include "nn/parallel/zero.h"
#include "nn/state.h"
#include "ops/ops.h"
#include "test_util.h"
#include "train/metrics.h"

using namespace vitrine;
using namespace vt_test;
namespace data = vitrine::nn::data;

namespace {

dist::ProcessGroup& world() { return dist::world(); }

/// The explanation tests' tiny ViT on 8x8 grey images, without qkv's bias: its key part has a
/// gradient that is zero in exact arithmetic (softmax does not change when the same number is
/// added to a whole row of scores), so in float32 it is rounding noise, which Adam divides by its
/// own size: its updates are +-lr whatever the summation order, and no two orders agree on them
/// (7.8e-5 relative after 3 steps with it).
models::ViTConfig small_vit() {
  models::ViTConfig c = tiny_vit_config(8, 8, 1);
  c.qkv_bias = false;
  return c;
}

/// The global batch of step s, micro-batch m: the same on every rank (seeded by s and m).
std::pair<Tensor, Tensor> global_batch(int64_t b, int64_t s, int64_t m) {
  Generator g(1000 + 17 * static_cast<uint64_t>(s) + static_cast<uint64_t>(m));
  Tensor x = ops::randn({b, 1, 8, 8}, g);
  Tensor y = ops::randint(0, 3, {b}, g);
  return {x, y};
}

/// Rows r, r + R, r + 2R, ... of t: this rank's share of a global batch (the sampler's order).
Tensor shard_rows(const Tensor& t, int64_t rank, int64_t ranks) {
  return ops::slice(t, 0, rank, t.size(0), ranks).contiguous();
}

/// max |a - b| / max |b| over every parameter, the largest.
double max_relative_difference(nn::Module& a, nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const Tensor& x = pa[i].second;
    const Tensor& y = pb[i].second;
    const double diff = ops::max(ops::abs(ops::sub(x, y))).item();
    const double scale = ops::max(ops::abs(y)).item();
    worst = std::max(worst, diff / std::max(scale, 1e-12));
  }
  return worst;
}

struct Run {
  bool zero = false;
  int64_t accum = 1;
  double bucket_mb = 25;
  double clip = 0;
};

/// K AdamW steps of the small ViT: the reference on the whole global batch in this process, and
/// the data-parallel replica on this rank's share; returns the replica's difference from it.
double parity(const Run& run, int64_t* buckets = nullptr, nn::DDPStats* stats = nullptr) {
  const int64_t B = 8, K = 3;
  const int64_t rank = world().rank(), ranks = world().size();
  Generator g1(7), g2(7);
  auto reference = std::make_shared<models::VisionTransformer>(small_vit(), g1);
  auto replica = std::make_shared<models::VisionTransformer>(small_vit(), g2);
  nn::optim::AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.05;
  auto groups = [&](nn::Module& m) {
    return nn::optim::param_groups_with_decay(m, o.lr, o.weight_decay);
  };
  nn::optim::AdamW ref_opt(groups(*reference), o);
  std::shared_ptr<nn::DistributedDataParallel> ddp;
  std::unique_ptr<nn::optim::Optimizer> opt;
  if (run.zero) {
    nn::optim::AdamOptions a;
    a.beta1 = o.beta1;
    a.beta2 = o.beta2;
    a.eps = o.eps;
    opt = std::make_unique<nn::ZeroAdam>(groups(*replica), a, true, run.clip);
  } else {
    nn::DDPOptions d;
    d.bucket_cap_mb = run.bucket_mb;
    ddp = std::make_shared<nn::DistributedDataParallel>(replica, d);
    if (buckets) *buckets = static_cast<int64_t>(ddp->buckets().size());
    opt = std::make_unique<nn::optim::AdamW>(groups(*replica), o);
  }
  for (int64_t s = 0; s < K; ++s) {
    ref_opt.zero_grad();
    opt->zero_grad();
    for (int64_t m = 0; m < run.accum; ++m) {
      auto [x, y] = global_batch(B, s, m);
      const double scale = 1.0 / static_cast<double>(run.accum);
      (ops::cross_entropy(reference->forward(x), y) * scale).backward();
      Tensor xs = shard_rows(x, rank, ranks), ys = shard_rows(y, rank, ranks);
      std::optional<nn::DistributedDataParallel::NoSync> local;
      if (ddp && m + 1 < run.accum) local.emplace(*ddp);
      Tensor logits = ddp ? ddp->forward(xs) : replica->forward(xs);
      (ops::cross_entropy(logits, ys) * scale).backward();
    }
    if (run.clip > 0) nn::optim::clip_grad_norm_(reference->parameters(), run.clip);
    if (run.clip > 0 && !run.zero) nn::optim::clip_grad_norm_(replica->parameters(), run.clip);
    ref_opt.step();
    opt->step();
  }
  if (ddp && stats) *stats = ddp->stats();
  return max_relative_difference(*replica, *reference);
}

/// max |a - b| / max |b| over every tensor of the state dicts (parameters and buffers), the
/// largest.
double max_state_difference(nn::Module& a, nn::Module& b) {
  const nn::NamedTensors sa = a.state_dict(), sb = b.state_dict();
  REQUIRE(sa.size() == sb.size());
  double worst = 0;
  for (size_t i = 0; i < sa.size(); ++i) {
    REQUIRE(sa[i].first == sb[i].first);
    const Tensor x = sa[i].second.to(kFloat64), y = sb[i].second.to(kFloat64);
    const double diff = ops::max(ops::abs(ops::sub(x, y))).item();
    const double scale = ops::max(ops::abs(y)).item();
    worst = std::max(worst, diff / std::max(scale, 1e-12));
  }
  return worst;
}

/// K SGD steps (momentum 0.9: the updates are proportional to the gradients, so a gradient off by
/// any factor shows, where Adam's would not) of a ResNet-8 (width 4, 8x8 grey images, 3 classes;
/// 9 BatchNorms) under DDP: the reference on the whole global batch in this process, the replica
/// on this rank's share, converted to SyncBatchNorm when sync_bn; returns the replica's difference
/// from the reference (weights and running statistics).
double resnet_parity(bool sync_bn) {
  const int64_t B = 8, K = 3;
  const int64_t rank = world().rank(), ranks = world().size();
  models::ResNetConfig c;
  c.depth = 8;
  c.channels = 1;
  c.num_classes = 3;
  c.width = 4;
  c.image_h = c.image_w = 8;
  Generator g1(7), g2(7);
  auto reference = std::make_shared<models::ResNet>(c, g1);
  std::shared_ptr<nn::Module> replica = std::make_shared<models::ResNet>(c, g2);
  if (sync_bn) replica = nn::convert_sync_batchnorm(replica);  // before DDP and the optimizer
  auto ddp = std::make_shared<nn::DistributedDataParallel>(replica);
  nn::optim::SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  nn::optim::SGD ref_opt(reference->parameters(), o), opt(replica->parameters(), o);
  for (int64_t s = 0; s < K; ++s) {
    ref_opt.zero_grad();
    opt.zero_grad();
    auto [x, y] = global_batch(B, s, 0);
    ops::cross_entropy(reference->forward(x), y).backward();
    ops::cross_entropy(ddp->forward(shard_rows(x, rank, ranks)), shard_rows(y, rank, ranks))
        .backward();
    ref_opt.step();
    opt.step();
  }
  return max_state_difference(*replica, *reference);
}

}  // namespace

TEST_CASE("dist: collectives on float32, float64 and int64 buffers") {
  omp_set_num_threads(1);
  const int r = world().rank(), n = world().size();
  Tensor a = ops::full({3}, static_cast<double>(r + 1), kFloat32);
  dist::all_reduce(a);
  check_close(a, std::vector<double>(3, n * (n + 1) / 2.0));
  Tensor b = ops::full({2}, static_cast<double>(r + 1), kFloat64);
  dist::all_reduce(b, dist::ReduceOp::Average);
  check_close(b, std::vector<double>(2, (n + 1) / 2.0));
  Tensor c = ops::full({2}, static_cast<double>(10 * r), kInt64);
  dist::all_reduce(c, dist::ReduceOp::Max);
  CHECK(c.to_vector<int64_t>() == std::vector<int64_t>{10 * (n - 1), 10 * (n - 1)});
  auto work = dist::all_reduce_async(a, dist::ReduceOp::Min);
  work->wait();
  CHECK(work->test());

  Tensor d = ops::full({4}, static_cast<double>(r == 0 ? 42 : -1), kFloat32);
  dist::broadcast(d, 0);
  check_close(d, std::vector<double>(4, 42));
  CHECK(dist::broadcast_string(r == 0 ? "runs/x-2" : "other") == "runs/x-2");

  Tensor e = ops::full({2}, static_cast<double>(r), kFloat64);
  Tensor gathered = dist::all_gather(e);
  CHECK(gathered.shape() == Dims{n, 2});
  for (int k = 0; k < n; ++k)
    check_close(gathered.narrow(0, k, 1).reshape({2}), {1.0 * k, 1.0 * k});

  // in = [0, 1, ..., 2n-1] + r; rank k gets rows 2k, 2k+1 summed over ranks.
  Tensor f = ops::add(ops::arange(0, 2 * n, 1, kFloat32), static_cast<double>(r));
  Tensor mine = dist::reduce_scatter(f, dist::ReduceOp::Sum);
  const double ranks_sum = n * (n - 1) / 2.0;
  check_close(mine, {n * 2.0 * r + ranks_sum, n * (2.0 * r + 1) + ranks_sum});

  CHECK_ERROR_CONTAINS(dist::all_reduce(ops::zeros({4, 4}).transpose(0, 1)), "contiguous");
  if (n > 1) {
    CHECK_ERROR_CONTAINS(dist::reduce_scatter(ops::zeros({3 * n + 1})), "divide among");
  }
  dist::barrier();
}

TEST_CASE("dist: DDP after K steps holds the parameters of one process with the whole batch") {
  omp_set_num_threads(1);
  int64_t buckets = 0;
  nn::DDPStats stats;
  CHECK(parity({}, &buckets, &stats) <= 1e-5);
  if (world().size() > 1) {
    CHECK(buckets == 1);  // the small ViT fits in one 25 MB bucket
    // One averaging per step (3), each all of the trainable float32 parameters.
    Generator g(7);
    const int64_t n = models::VisionTransformer(small_vit(), g).num_parameters(true);
    CHECK(stats.reductions == 3);
    CHECK(stats.bytes == 3 * 4 * n);
  }
  // Many buckets: each its own all-reduce, started while backward goes on.
  CHECK(parity({.bucket_mb = 0.0002}, &buckets) <= 1e-5);
  if (world().size() > 1) CHECK(buckets > 5);
  // Gradient accumulation: the first micro-batch under no_sync, the second averages the sum.
  CHECK(parity({.accum = 2}, nullptr, &stats) <= 1e-5);
  if (world().size() > 1) CHECK(stats.reductions == 3);  // no_sync: one per step, not per batch
  CHECK(parity({.accum = 2, .bucket_mb = 0.0002, .clip = 0.5}) <= 1e-5);
}

TEST_CASE("dist: ZeRO-1 after K steps holds the parameters of one process with the whole batch") {
  omp_set_num_threads(1);
  CHECK(parity({.zero = true}) <= 1e-5);
  CHECK(parity({.zero = true, .accum = 2}) <= 1e-5);
  CHECK(parity({.zero = true, .accum = 2, .clip = 0.5}) <= 1e-5);

  // The state is sharded: each rank holds about 1/N of it, and saves and loads it whole.
  Generator g(3);
  auto model = std::make_shared<models::VisionTransformer>(small_vit(), g);
  nn::ZeroAdam zero(nn::optim::param_groups_with_decay(*model, 1e-2, 0.05), {}, true);
  const int64_t n = model->num_parameters(true);
  CHECK(zero.total_size() >= n);
  CHECK(zero.shard_size() == zero.total_size() / world().size());
  CHECK(zero.state_bytes() == 2 * 4 * zero.shard_size());
  auto [x, y] = global_batch(4, 0, 0);
  ops::cross_entropy(model->forward(x), y).backward();
  zero.step();
  const nn::NamedTensors state = zero.state_tensors();  // whole tensors, in Adam's format
  CHECK(state.size() == 2 * model->parameters().size());
  nn::optim::AdamW plain(nn::optim::param_groups_with_decay(*model, 1e-2, 0.05));
  plain.load_state(state, zero.state_json());  // a ZeRO checkpoint resumes with plain AdamW
  CHECK(plain.step_count(0, 0) == 1);
  nn::ZeroAdam again(nn::optim::param_groups_with_decay(*model, 1e-2, 0.05), {}, true);
  again.load_state(plain.state_tensors(), plain.state_json());  // and the other way round
  const nn::NamedTensors back = again.state_tensors();
  REQUIRE(back.size() == state.size());
  for (size_t i = 0; i < back.size(); ++i) check_close(back[i].second, state[i].second, 0, 0);
}

TEST_CASE("dist: SyncBatchNorm on each rank's share of a batch is batch norm on the whole batch") {
  omp_set_num_threads(1);
  const int64_t rank = world().rank(), ranks = world().size();
  const int64_t B = 5, C = 3;  // 2 and 3 images with 2 ranks: the counts weigh the statistics
  const int64_t begin = B * rank / ranks, mine = B * (rank + 1) / ranks - begin;
  for (DType dt : {kFloat32, kFloat64}) {
    INFO("dtype " << dtype_name(dt));
    const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
    Generator g(21);
    const Tensor w = ops::randn({C}, g, dt) + 1.0, b = ops::randn({C}, g, dt);
    nn::SyncBatchNorm sync(C);
    nn::BatchNorm2d whole(C);
    for (nn::BatchNorm2d* bn : {static_cast<nn::BatchNorm2d*>(&sync), &whole}) {
      bn->to(dt);
      NoGradGuard ng;
      bn->weight.copy_(w);
      bn->bias.copy_(b);
    }
    for (int step = 0; step < 2; ++step) {  // the running statistics move twice
      const Tensor x = ops::randn({B, C, 3, 4}, g, dt) * 2.0 + 0.5;
      const Tensor r = ops::randn({B, C, 3, 4}, g, dt);
      const Tensor xw = x.detach().requires_grad_();
      const Tensor xl = x.narrow(0, begin, mine).contiguous().requires_grad_();
      sync.zero_grad();
      whole.zero_grad();
      const Tensor y = whole(xw), yl = sync(xl);
      ops::sum(y * r).backward();
      ops::sum(yl * r.narrow(0, begin, mine)).backward();
      check_close(yl, y.narrow(0, begin, mine), tol, tol);
      check_close(xl.grad(), xw.grad().narrow(0, begin, mine), tol, tol);
      // Each rank's parameter gradients are its share: summed, the whole batch's.
      for (auto [local, ref] : {std::pair{sync.weight.grad(), whole.weight.grad()},
                                std::pair{sync.bias.grad(), whole.bias.grad()}}) {
        Tensor sum = local.clone();
        dist::all_reduce(sum);
        check_close(sum, ref, tol, tol);
      }
      check_close(sync.running_mean, whole.running_mean, tol, tol);
      check_close(sync.running_var, whole.running_var, tol, tol);  // unbiased by 60 / 59
    }
    CHECK(sync.num_batches_tracked.item<int64_t>() == 2);
    // eval: the running statistics, as BatchNorm2d with the same state, bit for bit
    sync.eval();
    nn::BatchNorm2d plain(C);
    plain.to(dt);
    nn::load_state_dict(plain, sync.state_dict());
    plain.eval();
    const Tensor xe = ops::randn({2, C, 3, 4}, g, dt);
    check_close(sync(xe), plain(xe), 0, 0);
  }
  dist::barrier();
}

TEST_CASE(
    "dist: a ResNet with SyncBatchNorm under DDP after K steps holds the weights of one process "
    "with the whole batch") {
  omp_set_num_threads(1);
  const double synced = resnet_parity(true);
  INFO("SyncBatchNorm: " << synced);
  CHECK(synced <= 1e-5);
  if (world().size() > 1) {
    // Without it each rank normalises by the statistics of its own images: another training.
    const double plain = resnet_parity(false);
    INFO("BatchNorm2d: " << plain);
    CHECK(plain > 1e-3);
  }
}

TEST_CASE("dist: the loader's shards are disjoint, cover the data, and change with the epoch") {
  omp_set_num_threads(1);
  const int64_t rank = world().rank(), ranks = world().size();
  class Numbers : public data::Dataset {
   public:
    int64_t size() const override { return 11; }
    data::Example get(int64_t i) const override {
      data::Example e;
      e.label = i;
      e.image.channels = e.image.height = e.image.width = 1;
      e.image.pixels = {static_cast<float>(i)};
      return e;
    }
    std::vector<std::string> classes() const override { return {}; }
    std::string source() const override { return "numbers"; }
  };
  auto numbers = std::make_shared<Numbers>();
  auto epoch_indices = [&](int64_t epoch, bool pad) {
    data::LoaderOptions lo;
    lo.batch_size = 2;
    lo.workers = 0;
    lo.seed = 5;
    lo.num_replicas = ranks;
    lo.rank = rank;
    lo.pad_shards = pad;
    data::DataLoader loader(numbers, data::Compose{}, lo);
    loader.start_epoch(epoch);
    std::vector<int64_t> got;
    while (auto b = loader.next())
      for (int64_t i : b->indices) got.push_back(i);
    CHECK(static_cast<int64_t>(got.size()) == loader.shard_size());
    return got;
  };
  for (int64_t epoch : {0, 1}) {
    std::vector<int64_t> mine = epoch_indices(epoch, true);
    CHECK(static_cast<int64_t>(mine.size()) == (11 + ranks - 1) / ranks);  // equal counts
    Tensor t = Tensor::empty({static_cast<int64_t>(mine.size())}, kInt64);
    std::copy(mine.begin(), mine.end(), t.data<int64_t>());
    std::vector<int64_t> all = dist::all_gather(t).to_vector<int64_t>();
    std::set<int64_t> distinct(all.begin(), all.end());
    CHECK(distinct.size() == 11);  // every example is in some shard
    const auto padded = static_cast<size_t>((11 + ranks - 1) / ranks * ranks);
    CHECK(all.size() == padded);  // the only repeats are the padding's
    // Without padding (evaluation): exactly a partition.
    std::vector<int64_t> exact = epoch_indices(epoch, false);
    Tensor count = ops::full({1}, static_cast<double>(exact.size()), kInt64);
    dist::all_reduce(count);
    CHECK(count.item<int64_t>() == 11);
  }
  // The shuffle changes with the epoch, and matches one process's order cut into R strides.
  std::vector<int64_t> order0 = data::permutation(11, 5, 0), order1 = data::permutation(11, 5, 1);
  CHECK(order0 != order1);
  CHECK(epoch_indices(0, true) == data::distributed_shard(order0, ranks, rank));
  CHECK(epoch_indices(1, true) == data::distributed_shard(order1, ranks, rank));
}

TEST_CASE("dist: metrics summed across ranks equal one process's on the whole data") {
  omp_set_num_threads(1);
  const int64_t rank = world().rank(), ranks = world().size();
  Generator g(11);
  Tensor logits = ops::randn({37, 4}, g);
  Tensor labels = ops::randint(0, 4, {37}, g);
  Tensor losses = ops::cross_entropy(logits, labels, ops::Reduction::None);
  train::Evaluator whole(4);
  whole.add(logits, labels, ops::sum(losses).item());
  train::Evaluator part;  // the classes come from the logits (or, with none, from the others)
  for (int64_t i = rank; i < 37; i += ranks) {
    Tensor l = logits.narrow(0, i, 1), y = labels.narrow(0, i, 1);
    part.add(l, y, losses.narrow(0, i, 1).item());
  }
  part.all_reduce(world());
  const train::Evaluation a = whole.result(), b = part.result();
  CHECK(b.count == 37);
  CHECK(b.confusion == a.confusion);
  CHECK(b.accuracy == doctest::Approx(a.accuracy));
  CHECK(b.loss ==
        doctest::Approx(a.loss).epsilon(1e-6));  // float32 losses, summed in another order
  CHECK(b.macro_f1 == doctest::Approx(a.macro_f1));
  for (size_t k = 0; k < a.per_class.size(); ++k) {
    CHECK(b.per_class[k].precision == doctest::Approx(a.per_class[k].precision));
    CHECK(b.per_class[k].recall == doctest::Approx(a.per_class[k].recall));
  }
}

// ---- NCCL on the GPU (single-process cases: ctest runs them without mpirun) ------------------

namespace {

/// Why an NCCL case cannot run here ("" when it can): the build, the GPU, the world's size.
std::string nccl_unavailable() {
  if (!dist::have_nccl())
    return "this build has no NCCL (VITRINE_CUDA=ON finds nccl.h and libnccl in the CUDA "
           "toolkit; VITRINE_NCCL=OFF turns it off)";
  if (!vt_test::gpu_unavailable().empty()) return vt_test::gpu_unavailable();
  if (world().size() != 1) return "a one-rank case, run as a world of one (not under mpirun)";
  return "";
}

/// A bootstrap group that says it is rank 1 of 2, the second process of its machine: what an
/// NCCL group's constructor sees in the second of two processes started on one machine.
class SecondOfTwo final : public dist::ProcessGroup {
 public:
  SecondOfTwo() : ProcessGroup(1, 2, 1) {}
  std::string backend() const override { return "test"; }
  std::unique_ptr<dist::Work> all_reduce_async(dist::Buffer, dist::ReduceOp) override {
    fail("SecondOfTwo: no collectives");
  }
  void broadcast(dist::Buffer, int) override { fail("SecondOfTwo: reached the bootstrap"); }
  void all_gather(dist::Buffer, dist::Buffer) override { fail("SecondOfTwo: no collectives"); }
  void reduce_scatter(dist::Buffer, dist::Buffer, dist::ReduceOp) override {
    fail("SecondOfTwo: no collectives");
  }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

}  // namespace

TEST_CASE("dist: a one-rank NCCL group on the GPU runs the collectives and a data-parallel step") {
  if (const std::string why = nccl_unavailable(); !why.empty()) {
    skip(why);
    return;
  }
  const Device gpu = Device::parse("cuda");
  dist::ProcessGroup& nccl = dist::nccl_world();
  CHECK(nccl.backend() == "nccl");
  CHECK(nccl.size() == 1);
  CHECK(nccl.rank() == 0);

  // The collectives of one rank: the buffer as it was (Sum, Average, Max), gathered once.
  Tensor a = ops::arange(0, 5, 1, kFloat32).to(gpu);
  dist::all_reduce(a, dist::ReduceOp::Sum, &nccl);
  check_close(a.to(kCPU), {0, 1, 2, 3, 4});
  Tensor b = ops::full({3}, 2.5, kFloat64).to(gpu);
  dist::all_reduce(b, dist::ReduceOp::Average, &nccl);
  check_close(b.to(kCPU), {2.5, 2.5, 2.5});
  auto work = dist::all_reduce_async(a, dist::ReduceOp::Max, &nccl);
  work->wait();
  check_close(a.to(kCPU), {0, 1, 2, 3, 4});
  dist::broadcast(b, 0, &nccl);
  check_close(b.to(kCPU), {2.5, 2.5, 2.5});
  Tensor gathered = dist::all_gather(b, &nccl);
  CHECK(gathered.shape() == Dims{1, 3});
  CHECK_ERROR_CONTAINS(dist::all_reduce(ops::zeros({2}), dist::ReduceOp::Sum, &nccl), "NCCL",
                       "cpu");
  dist::barrier(&nccl);

  // A data-parallel step by hand on the GPU: forward, backward, every gradient averaged through
  // NCCL, AdamW; with one rank it is the plain step, bit for bit. Then the same model wrapped in
  // DistributedDataParallel over the NCCL group takes a step (a group of one averages nothing,
  // as DDP says) and matches too.
  Generator g1(7), g2(7), g3(7);
  auto plain = std::make_shared<models::VisionTransformer>(small_vit(), g1);
  auto by_hand = std::make_shared<models::VisionTransformer>(small_vit(), g2);
  auto wrapped = std::make_shared<models::VisionTransformer>(small_vit(), g3);
  for (auto* m : {&plain, &by_hand, &wrapped}) (*m)->to(gpu);
  nn::DistributedDataParallel ddp(wrapped, {}, &nccl);
  nn::optim::AdamW o1(plain->parameters(), {.lr = 1e-2}), o2(by_hand->parameters(), {.lr = 1e-2}),
      o3(wrapped->parameters(), {.lr = 1e-2});
  for (int64_t s = 0; s < 2; ++s) {
    auto batch = global_batch(8, s, 0);
    Tensor x = batch.first.to(gpu), y = batch.second.to(gpu);
    ops::cross_entropy(plain->forward(x), y).backward();
    ops::cross_entropy(by_hand->forward(x), y).backward();
    ops::cross_entropy(ddp.forward(x), y).backward();
    for (const Tensor& p : by_hand->parameters())
      if (p.grad().defined()) dist::all_reduce(p.grad(), dist::ReduceOp::Average, &nccl);
    for (auto* o : {&o1, &o2, &o3}) {
      o->step();
      o->zero_grad();
    }
  }
  auto pp = plain->parameters(), ph = by_hand->parameters(), pw = wrapped->parameters();
  REQUIRE(pp.size() == ph.size());
  REQUIRE(pp.size() == pw.size());
  for (size_t i = 0; i < pp.size(); ++i) {
    INFO("parameter " << i);
    CHECK(pp[i].device() == gpu);
    CHECK(pp[i].to(kCPU).to_vector<float>() == ph[i].to(kCPU).to_vector<float>());
    CHECK(pp[i].to(kCPU).to_vector<float>() == pw[i].to(kCPU).to_vector<float>());
  }
}

TEST_CASE("dist: one GPU cannot hold two NCCL ranks") {
  // The second process on a machine with one GPU asks for cuda:1: NCCL's group refuses before it
  // joins (NCCL itself refuses two ranks on one device: "Duplicate GPU detected").
  if (const std::string why = nccl_unavailable(); !why.empty()) {
    skip(why);
    return;
  }
  SecondOfTwo bootstrap;
  try {
    dist::detail::make_nccl_group(bootstrap);
    FAIL("an NCCL group for the second process of a machine was made");
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("reached the bootstrap") != std::string::npos) {
      skip("this machine has more than one GPU: a second rank has a GPU of its own here");
      return;
    }
    CHECK(count(what, "one GPU cannot hold two ranks") == 1);
    CHECK(count(what, "1 GPU(s)") == 1);
    CHECK(count(what, "one process per GPU") == 1);
  }
}
