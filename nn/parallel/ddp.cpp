// DistributedDataParallel: buckets, the post-accumulate hooks that start their all-reduces, and
// the wait at the end of backward (ddp.h).
#include "nn/parallel/ddp.h"

#include <chrono>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "nn/parallel/collectives.h"
#include "ops/batch_invariant.h"
#include "ops/batch_tree.h"
#include "ops/ops.h"

namespace vitrine::nn {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

/// The per-iteration state; shared with the parameters' hooks (which hold it weakly, so a hook
/// outliving its DistributedDataParallel does nothing).
struct DistributedDataParallel::Reducer {
  struct Bucket {
    std::vector<size_t> members;  // indices into params
    std::vector<int64_t> offsets;
    Tensor flat;  // [sum of the members' numel], the members' dtype and device
    int64_t pending = 0;
    std::unique_ptr<dist::Work> work;  // set while its all-reduce runs
    bool started = false;
  };
  dist::ProcessGroup* group = nullptr;
  std::vector<Tensor> params;
  std::vector<std::string> names;
  std::vector<size_t> bucket_of;  // param -> its bucket
  std::vector<Bucket> buckets;
  std::vector<bool> ready;
  bool sync = true;
  bool armed = false;  // a forward with grad mode on prepared this iteration
  int64_t started = 0;
  DDPStats stats;

  void arm() {
    for (Bucket& b : buckets) {
      b.pending = static_cast<int64_t>(b.members.size());
      b.started = false;
    }
    std::fill(ready.begin(), ready.end(), false);
    started = 0;
    armed = true;
  }

  void start(Bucket& b) {
    NoGradGuard no_grad;
    for (size_t k = 0; k < b.members.size(); ++k) {
      const Tensor& p = params[b.members[k]];
      Tensor slot = b.flat.narrow(0, b.offsets[k], p.numel());
      Tensor g = p.grad();
      if (g.defined())
        slot.copy_(g.reshape({p.numel()}));
      else
        slot.fill_(0);
    }
    if (is_batch_invariant() && b.flat.device().type == DeviceType::CPU) {
      // Batch-invariant (ops/batch_invariant.h): the ranks' gradients added in the batch's tree
      // (pairwise, in rank order), not in the MPI library's order, then averaged (exact for a
      // power-of-two number of ranks): one process's bits on the whole batch.
      const Tensor all = dist::all_gather(b.flat, group);  // [R, n]
      b.flat.copy_(ops::mul(ops::detail::tree_sum_partials(all.contiguous()),
                            1.0 / static_cast<double>(all.size(0))));
    } else {
      b.work = dist::all_reduce_async(b.flat, dist::ReduceOp::Average, group);
    }
    b.started = true;
    ++started;
    stats.bytes += b.flat.numel() * static_cast<int64_t>(dtype_size(b.flat.dtype()));
  }

  void on_ready(size_t i) {
    if (!sync || !armed || ready[i]) return;
    ready[i] = true;
    if (--buckets[bucket_of[i]].pending == 0) start(buckets[bucket_of[i]]);
    // Let the transfers already under way progress (MPI moves data inside its calls).
    for (Bucket& o : buckets)
      if (o.work) o.work->test();
    if (started == static_cast<int64_t>(buckets.size())) finish();
  }

  void finish() {
    if (!armed) return;
    for (Bucket& b : buckets)
      if (!b.started) start(b);
    const auto t0 = std::chrono::steady_clock::now();
    for (Bucket& b : buckets)
      if (b.work) b.work->wait();
    stats.wait_seconds += seconds_since(t0);
    NoGradGuard no_grad;
    for (Bucket& b : buckets) {
      for (size_t k = 0; k < b.members.size(); ++k) {
        const Tensor& p = params[b.members[k]];
        Tensor avg = b.flat.narrow(0, b.offsets[k], p.numel()).reshape(p.shape());
        Tensor g = p.grad();
        if (g.defined() && !g.requires_grad())
          g.copy_(avg);
        else
          p.set_grad(avg.clone());
      }
      b.work.reset();
    }
    ++stats.reductions;
    armed = false;
  }
};

void broadcast_state(Module& module, int root, dist::ProcessGroup* group) {
  if (dist::world().size() == 1) return;
  NoGradGuard no_grad;
  for (auto& [name, t] : module.state_dict()) {
    (void)name;
    dist::ProcessGroup& g = group ? *group : dist::group_for(t.device());
    if (t.is_contiguous()) {
      dist::broadcast(t, root, &g);
    } else {
      Tensor c = t.contiguous();
      dist::broadcast(c, root, &g);
      Tensor(t).copy_(c);
    }
  }
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options,
                                                 dist::ProcessGroup* group)
    : module_(std::move(module)), options_(options), reducer_(std::make_shared<Reducer>()) {
  VT_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  VT_CHECK(options_.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be > 0, got {}",
           options_.bucket_cap_mb);
  register_module("module", module_);
  Reducer& r = *reducer_;
  for (auto& [name, p] : module_->named_parameters())
    if (p.requires_grad()) {
      r.params.push_back(p);
      r.names.push_back(name);
    }
  const Device device = r.params.empty() ? kCPU : r.params.front().device();
  for (const Tensor& p : r.params)
    VT_CHECK(p.device() == device,
             "DistributedDataParallel: the parameters are on {} and {}; a replica lives on one "
             "device",
             device.str(), p.device().str());
  group_ = group ? group : &dist::group_for(device);
  r.group = group_;

  broadcast_state(*module_, 0, group_);  // rank 0's weights everywhere
  if (group_->size() == 1) return;       // nothing to average: no buckets, no hooks

  // Buckets in reverse registration order, one dtype each, up to bucket_cap_mb.
  const auto cap = static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024);
  r.bucket_of.resize(r.params.size());
  r.ready.assign(r.params.size(), false);
  int64_t bytes = 0;
  for (size_t j = r.params.size(); j-- > 0;) {
    const Tensor& p = r.params[j];
    const int64_t nbytes = p.numel() * static_cast<int64_t>(dtype_size(p.dtype()));
    if (r.buckets.empty() || bytes + nbytes > cap ||
        r.params[r.buckets.back().members.front()].dtype() != p.dtype()) {
      if (r.buckets.empty() || !r.buckets.back().members.empty()) r.buckets.emplace_back();
      bytes = 0;
    }
    auto& b = r.buckets.back();
    r.bucket_of[j] = r.buckets.size() - 1;
    b.offsets.push_back(b.members.empty() ? 0
                                          : b.offsets.back() + r.params[b.members.back()].numel());
    b.members.push_back(j);
    bytes += nbytes;
  }
  for (auto& b : r.buckets) {
    const Tensor& last = r.params[b.members.back()];
    b.flat = Tensor::empty({b.offsets.back() + last.numel()}, last.dtype(), device);
  }
  std::weak_ptr<Reducer> weak = reducer_;
  for (size_t j = 0; j < r.params.size(); ++j)
    r.params[j].register_post_accumulate_grad_hook([weak, j](const Tensor&) {
      if (auto s = weak.lock()) s->on_ready(j);
    });
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& x) {
  Reducer& r = *reducer_;
  if (group_->size() > 1 && GradMode::is_enabled() && r.sync) {
    if (r.armed && std::find(r.ready.begin(), r.ready.end(), true) != r.ready.end()) {
      std::string missing;
      for (size_t j = 0; j < r.params.size(); ++j)
        if (!r.ready[j]) missing += (missing.empty() ? "" : ", ") + r.names[j];
      fail(
          "DistributedDataParallel: the last backward gave no gradient to {} (not used by the "
          "forward?): freeze unused parameters before wrapping, or call synchronize() after "
          "backward",
          missing);
    }
    if (options_.broadcast_buffers && module_->is_training()) {
      NoGradGuard no_grad;
      for (auto& [name, b] : module_->named_buffers()) {
        (void)name;
        if (b.is_contiguous()) dist::broadcast(b, 0, group_);
      }
    }
    r.arm();
  }
  return (*module_)(x);
}

bool DistributedDataParallel::sync_enabled() const { return reducer_->sync; }

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& d)
    : ddp_(d), was_(d.reducer_->sync) {
  d.reducer_->sync = false;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.reducer_->sync = was_; }

void DistributedDataParallel::synchronize() {
  if (reducer_->sync) reducer_->finish();
}

void DistributedDataParallel::all_reduce_gradients() {
  reducer_->arm();
  reducer_->finish();
}

std::vector<std::vector<size_t>> DistributedDataParallel::buckets() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : reducer_->buckets) out.push_back(b.members);
  return out;
}

const DDPStats& DistributedDataParallel::stats() const { return reducer_->stats; }
void DistributedDataParallel::reset_stats() { reducer_->stats = DDPStats{}; }

}  // namespace vitrine::nn
