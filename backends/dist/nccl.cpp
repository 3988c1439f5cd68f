// The NCCL process group (process_group.h): CUDA buffers, one process per GPU. NCCL is
// bootstrapped through the world's group as llm.c does: rank 0 makes the ncclUniqueId and
// broadcasts it; every rank then joins the communicator. Collectives run on the group's own
// stream: it first waits for the compute stream's work so far (an event), and the compute stream
// waits for the collective when the caller waits for it, so kernels after wait() see the result
// while the GPU computes other work in between.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>

#include "backends/dist/process_group.h"
#include "backends/error.h"

namespace vitrine {
/// The CUDA backend's stream (cuda_backend.cpp), where every kernel of the device runs.
cudaStream_t cuda_compute_stream();
}  // namespace vitrine

namespace vitrine::dist {

namespace {

void check_cuda(cudaError_t e, const char* what) {
  VT_CHECK(e == cudaSuccess, "dist (NCCL): {}: {}", what, cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* op, int rank) {
  VT_CHECK(r == ncclSuccess, "dist::{} (NCCL) on rank {}: {}", op, rank, ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType t, const char* op) {
  switch (t) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int64:
      return ncclInt64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    default:
      fail("dist::{} (NCCL): dtype {} is not supported", op, dtype_name(t));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Average:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
    default:
      return ncclSum;
  }
}

void check_cuda_buffer(const Buffer& b, const char* op) {
  VT_CHECK(b.device.is_cuda(),
           "dist::{} (NCCL): the buffer is on {}; NCCL reduces GPU buffers (CPU ones go "
           "through MPI)",
           op, b.device.str());
}

class NcclWork final : public Work {
 public:
  explicit NcclWork(cudaEvent_t done) : done_(done) {}
  ~NcclWork() override { wait(); }
  void wait() override {
    if (!done_) return;
    // The compute stream continues after the collective; the host does not block.
    check_cuda(cudaStreamWaitEvent(cuda_compute_stream(), done_, 0), "waiting for a collective");
    (void)cudaEventDestroy(done_);
    done_ = nullptr;
  }
  bool test() override { return !done_ || cudaEventQuery(done_) == cudaSuccess; }

 private:
  cudaEvent_t done_;
};

class NcclGroup final : public ProcessGroup {
 public:
  explicit NcclGroup(ProcessGroup& bootstrap)
      : ProcessGroup(bootstrap.rank(), bootstrap.size(), bootstrap.local_rank()),
        bootstrap_(bootstrap) {
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "counting GPUs");
    VT_CHECK(local_rank() < devices,
             "dist (NCCL): rank {} is process {} of its machine, which has {} GPU(s): one GPU "
             "cannot hold two ranks (NCCL refuses two ranks on one device); start at most one "
             "process per GPU",
             rank(), local_rank(), devices);
    check_cuda(cudaSetDevice(local_rank()), "cudaSetDevice");
    ncclUniqueId id{};
    if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "init", rank());
    static_assert(sizeof(id) % sizeof(int64_t) == 0);
    bootstrap.broadcast(Buffer{&id, sizeof(id) / sizeof(int64_t), DType::Int64, kCPU}, 0);
    check_nccl(ncclCommInitRank(&comm_, size(), id, rank()), "init", rank());
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclGroup() override {
    if (comm_) (void)ncclCommDestroy(comm_);
    if (stream_) (void)cudaStreamDestroy(stream_);
  }
  std::string backend() const override { return "nccl"; }

  std::unique_ptr<Work> all_reduce_async(Buffer x, ReduceOp op) override {
    check("all_reduce", x);
    check_cuda_buffer(x, "all_reduce");
    after_compute();
    check_nccl(ncclAllReduce(x.data, x.data, static_cast<size_t>(x.count),
                             nccl_type(x.dtype, "all_reduce"), nccl_op(op), comm_, stream_),
               "all_reduce", rank());
    return done();
  }
  void broadcast(Buffer x, int root) override {
    check("broadcast", x);
    check_cuda_buffer(x, "broadcast");
    after_compute();
    check_nccl(ncclBroadcast(x.data, x.data, static_cast<size_t>(x.count),
                             nccl_type(x.dtype, "broadcast"), root, comm_, stream_),
               "broadcast", rank());
    done()->wait();
  }
  void all_gather(Buffer in, Buffer out) override {
    check("all_gather", in, &out, size());
    check_cuda_buffer(in, "all_gather");
    after_compute();
    check_nccl(ncclAllGather(in.data, out.data, static_cast<size_t>(in.count),
                             nccl_type(in.dtype, "all_gather"), comm_, stream_),
               "all_gather", rank());
    done()->wait();
  }
  void reduce_scatter(Buffer in, Buffer out, ReduceOp op) override {
    check("reduce_scatter", in, &out, -size());
    check_cuda_buffer(in, "reduce_scatter");
    after_compute();
    check_nccl(
        ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.count),
                          nccl_type(in.dtype, "reduce_scatter"), nccl_op(op), comm_, stream_),
        "reduce_scatter", rank());
    done()->wait();
  }
  void barrier() override {
    check_cuda(cudaStreamSynchronize(stream_), "barrier");
    check_cuda(cudaStreamSynchronize(cuda_compute_stream()), "barrier");
    bootstrap_.barrier();
  }
  [[noreturn]] void abort(int code) override {
    if (comm_) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    bootstrap_.abort(code);
    std::_Exit(code);  // (not reached: a virtual call is not known to be noreturn)
  }

 private:
  /// The group's stream waits for what the compute stream has queued so far.
  void after_compute() {
    cudaEvent_t e;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(e, cuda_compute_stream()), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, e, 0), "cudaStreamWaitEvent");
    (void)cudaEventDestroy(e);
  }
  /// An event at the end of what the group's stream has queued.
  std::unique_ptr<Work> done() {
    cudaEvent_t e;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(e, stream_), "cudaEventRecord");
    return std::make_unique<NcclWork>(e);
  }

  ProcessGroup& bootstrap_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

bool have_nccl() { return true; }

namespace detail {
std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap) {
  return std::make_unique<NcclGroup>(bootstrap);
}
}  // namespace detail

}  // namespace vitrine::dist
