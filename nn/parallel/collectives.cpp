// Tensor collectives: checks, then the process group's call on the tensor's memory.
#include "nn/parallel/collectives.h"

#include <vector>

#include "autograd/grad_mode.h"

namespace vitrine::dist {

namespace {
ProcessGroup& pick(ProcessGroup* group, const Tensor& t) {
  return group ? *group : group_for(t.device());
}
}  // namespace

Buffer buffer(const Tensor& t, const char* op) {
  VT_CHECK(t.defined(), "dist::{}: the tensor is undefined", op);
  VT_CHECK(t.is_contiguous(), "dist::{}: the tensor (shape {}) must be contiguous", op, t.shape());
  return Buffer{t.data_ptr(), t.numel(), t.dtype(), t.device()};
}

void all_reduce(const Tensor& t, ReduceOp op, ProcessGroup* group) {
  all_reduce_async(t, op, group)->wait();
}

std::unique_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op, ProcessGroup* group) {
  auto w = pick(group, t).all_reduce_async(buffer(t, "all_reduce"), op);
  t.bump_version();
  return w;
}

void broadcast(const Tensor& t, int root, ProcessGroup* group) {
  pick(group, t).broadcast(buffer(t, "broadcast"), root);
  t.bump_version();
}

Tensor all_gather(const Tensor& t, ProcessGroup* group) {
  ProcessGroup& g = pick(group, t);
  Dims shape = t.shape();
  shape.insert(0, g.size());
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  g.all_gather(buffer(t, "all_gather"), buffer(out, "all_gather"));
  return out;
}

Tensor reduce_scatter(const Tensor& t, ReduceOp op, ProcessGroup* group) {
  ProcessGroup& g = pick(group, t);
  VT_CHECK(t.dim() >= 1 && t.size(0) % g.size() == 0,
           "dist::reduce_scatter: the first dim of shape {} must divide among {} processes",
           t.shape(), g.size());
  Dims shape = t.shape();
  shape[0] /= g.size();
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  g.reduce_scatter(buffer(t, "reduce_scatter"), buffer(out, "reduce_scatter"), op);
  return out;
}

std::string broadcast_string(const std::string& s, int root, ProcessGroup* group) {
  ProcessGroup& g = group ? *group : world();
  if (g.size() == 1) return s;
  int64_t n = static_cast<int64_t>(s.size());
  g.broadcast({&n, 1, kInt64, kCPU}, root);
  std::vector<int64_t> chars(s.begin(), s.end());  // one int64 per char: MPI's types here
  chars.resize(static_cast<size_t>(n));
  g.broadcast({chars.data(), n, kInt64, kCPU}, root);
  return std::string(chars.begin(), chars.end());
}

void barrier(ProcessGroup* group) { (group ? *group : world()).barrier(); }

}  // namespace vitrine::dist
