// The MPI process group (process_group.h): CPU buffers, one MPI call per collective. all_reduce is
// non-blocking (MPI_Iallreduce): the gradient buckets of DistributedDataParallel are reduced while
// backward goes on, and each test() lets MPI move the transfer along. Errors come back as
// vitrine::Error naming the collective and the rank (MPI_ERRORS_RETURN); a process that dies ends
// the whole job (mpirun stops the others and names the rank that failed).
#include <mpi.h>

#include <climits>
#include <cstdlib>

#include "backends/dist/process_group.h"
#include "backends/error.h"

namespace vitrine::dist {

namespace {

MPI_Datatype mpi_type(DType t, const char* op) {
  switch (t) {
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Int64:
      return MPI_INT64_T;
    default:
      fail("dist::{} (MPI): dtype {} is not supported (float32, float64 or int64)", op,
           dtype_name(t));
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
    default:
      return MPI_SUM;  // Average: a sum, divided by the world's size afterwards
  }
}

int mpi_count(const Buffer& b, const char* op) {
  VT_CHECK(b.device.is_cpu(),
           "dist::{} (MPI): the buffer is on {}; MPI reduces CPU buffers (GPU "
           "buffers go through NCCL)",
           op, b.device.str());
  VT_CHECK(b.count <= INT_MAX, "dist::{} (MPI): {} elements is more than one MPI call moves ({})",
           op, b.count, INT_MAX);
  return static_cast<int>(b.count);
}

void check_mpi(int code, const char* op, int rank) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail("dist::{} (MPI) on rank {}: {}", op, rank, std::string(text, static_cast<size_t>(len)));
}

/// x /= n for ReduceOp::Average (float buffers).
void divide(const Buffer& x, ReduceOp op, int n, const char* name) {
  if (op != ReduceOp::Average) return;
  if (x.dtype == DType::Float32) {
    auto* p = static_cast<float*>(x.data);
    const float s = 1.0f / static_cast<float>(n);
    for (int64_t i = 0; i < x.count; ++i) p[i] *= s;
  } else if (x.dtype == DType::Float64) {
    auto* p = static_cast<double*>(x.data);
    for (int64_t i = 0; i < x.count; ++i) p[i] /= n;
  } else {
    fail("dist::{}: Average needs a float buffer, got {}", name, dtype_name(x.dtype));
  }
}

class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request r, Buffer x, ReduceOp op, int size, int rank)
      : request_(r), x_(x), op_(op), size_(size), rank_(rank) {}
  ~MpiWork() override {
    if (!done_) MPI_Wait(&request_, MPI_STATUS_IGNORE);  // never leave MPI writing freed memory
  }
  void wait() override {
    if (done_) return;
    check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "all_reduce", rank_);
    finish();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    check_mpi(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "all_reduce", rank_);
    if (flag) finish();
    return done_;
  }

 private:
  void finish() {
    done_ = true;
    divide(x_, op_, size_, "all_reduce");
  }
  MPI_Request request_;
  Buffer x_;
  ReduceOp op_;
  int size_, rank_;
  bool done_ = false;
};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int node_rank() {  // the rank among the processes sharing this machine's memory
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &node);
  int r = 0;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  return r;
}

/// MPI_Init_thread, once, before anything else of MPI.
struct MpiInit {
  MpiInit() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      owns = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  bool owns = false;
};

MpiInit& mpi_init() {
  static MpiInit init;
  return init;
}

class MpiGroup final : public ProcessGroup {
 public:
  /// Call after mpi_init() (the arguments' order of evaluation is unspecified).
  MpiGroup(int rank, int size, int local_rank) : ProcessGroup(rank, size, local_rank) {}
  ~MpiGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (mpi_init().owns && !finalized) MPI_Finalize();
  }
  std::string backend() const override { return "mpi"; }

  std::unique_ptr<Work> all_reduce_async(Buffer x, ReduceOp op) override {
    check("all_reduce", x);
    const int n = mpi_count(x, "all_reduce");
    MPI_Request r;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, x.data, n, mpi_type(x.dtype, "all_reduce"), mpi_op(op),
                             MPI_COMM_WORLD, &r),
              "all_reduce", rank());
    return std::make_unique<MpiWork>(r, x, op, size(), rank());
  }
  void broadcast(Buffer x, int root) override {
    check("broadcast", x);
    VT_CHECK(root >= 0 && root < size(), "dist::broadcast: root {} is not a rank (0..{})", root,
             size() - 1);
    check_mpi(MPI_Bcast(x.data, mpi_count(x, "broadcast"), mpi_type(x.dtype, "broadcast"), root,
                        MPI_COMM_WORLD),
              "broadcast", rank());
  }
  void all_gather(Buffer in, Buffer out) override {
    check("all_gather", in, &out, size());
    const int n = mpi_count(in, "all_gather");
    mpi_count(out, "all_gather");
    const MPI_Datatype t = mpi_type(in.dtype, "all_gather");
    check_mpi(MPI_Allgather(in.data, n, t, out.data, n, t, MPI_COMM_WORLD), "all_gather", rank());
  }
  void reduce_scatter(Buffer in, Buffer out, ReduceOp op) override {
    check("reduce_scatter", in, &out, -size());
    mpi_count(in, "reduce_scatter");
    const int n = mpi_count(out, "reduce_scatter");
    check_mpi(MPI_Reduce_scatter_block(in.data, out.data, n, mpi_type(in.dtype, "reduce_scatter"),
                                       mpi_op(op), MPI_COMM_WORLD),
              "reduce_scatter", rank());
    divide(out, op, size(), "reduce_scatter");
  }
  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "barrier", rank()); }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
};

}  // namespace

bool have_mpi() { return true; }

namespace detail {
std::unique_ptr<ProcessGroup> make_mpi_group() {
  mpi_init();
  const int rank = world_rank(), size = world_size(), local = node_rank();
  return std::make_unique<MpiGroup>(rank, size, local);
}
}  // namespace detail

}  // namespace vitrine::dist
