// The world of this job: which process group a program gets (process_group.h), and the world of
// one process that runs without a launcher.
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backends/backend.h"
#include "backends/dist/process_group.h"
#include "backends/error.h"

namespace vitrine::dist {

void ProcessGroup::check(const char* op, const Buffer& in, const Buffer* out,
                         int64_t out_per_in) const {
  VT_CHECK(in.count >= 0 && (in.data != nullptr || in.count == 0),
           "dist::{}: the buffer is null or has a negative count ({})", op, in.count);
  if (!out) return;
  VT_CHECK(out->dtype == in.dtype, "dist::{}: input is {} but output is {}", op,
           dtype_name(in.dtype), dtype_name(out->dtype));
  VT_CHECK(out->device == in.device, "dist::{}: input is on {} but output on {}", op,
           in.device.str(), out->device.str());
  const bool gather = out_per_in > 0;
  const int64_t expected = gather ? in.count * out_per_in : in.count / -out_per_in;
  VT_CHECK(out->count == expected && (gather || in.count % -out_per_in == 0),
           "dist::{}: {} input elements need {} output elements on {} processes, got {}", op,
           in.count, expected, size(), out->count);
}

namespace {

void copy_buffer(const Buffer& from, const Buffer& to) {
  if (from.data == to.data || from.count == 0) return;
  Strided s{from.data, from.dtype, Dims{from.count}, Dims{1}};
  Strided d{to.data, to.dtype, Dims{to.count}, Dims{1}};
  backend_for(from.device).copy(s, d);
}

class NoWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

/// A world of one process: reductions leave x as it is (the op over one value), gathers copy.
class SingleProcess final : public ProcessGroup {
 public:
  SingleProcess() : ProcessGroup(0, 1, 0) {}
  std::string backend() const override { return "single"; }
  std::unique_ptr<Work> all_reduce_async(Buffer x, ReduceOp) override {
    check("all_reduce", x);
    return std::make_unique<NoWork>();
  }
  void broadcast(Buffer x, int root) override {
    check("broadcast", x);
    VT_CHECK(root == 0, "dist::broadcast: root {} is not a rank of a world of one", root);
  }
  void all_gather(Buffer in, Buffer out) override {
    check("all_gather", in, &out, 1);
    copy_buffer(in, out);
  }
  void reduce_scatter(Buffer in, Buffer out, ReduceOp) override {
    check("reduce_scatter", in, &out, -1);
    copy_buffer(in, out);
  }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

std::once_flag world_once;
std::unique_ptr<ProcessGroup> world_group;

}  // namespace

namespace detail {
std::unique_ptr<ProcessGroup> make_single_group() { return std::make_unique<SingleProcess>(); }
}  // namespace detail

namespace {
/// The job's size as the launcher says (0 when there is no launcher).
int launcher_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(var); v && *v) return std::atoi(v);
  return 0;
}
}  // namespace

bool launched() { return launcher_size() > 1; }

ProcessGroup& world() {
  std::call_once(world_once, [] {
    if (launcher_size() > 0 && have_mpi()) world_group = detail::make_mpi_group();
    if (!world_group) world_group = detail::make_single_group();
  });
  VT_CHECK(!launched() || world_group->size() > 1,
           "dist: a launcher started {} processes, but this Vitrine was built without MPI "
           "(cmake -DVITRINE_MPI=ON needs Debian's libopenmpi-dev): each would train alone; run "
           "without mpirun, or rebuild with MPI",
           launcher_size());
  return *world_group;
}

ProcessGroup& nccl_world() {
  static std::once_flag once;
  static std::unique_ptr<ProcessGroup> group;
  std::call_once(once, [] { group = detail::make_nccl_group(world()); });
  return *group;
}

ProcessGroup& group_for(Device device) {
  ProcessGroup& w = world();
  if (device.is_cpu() || w.size() == 1) return w;
  return nccl_world();
}

}  // namespace vitrine::dist
