// Process groups: the processes of a data-parallel job and the collectives between them.
//
// A job of `size` processes (ranks 0 .. size-1), started by a launcher (mpirun), each holding a
// copy of the model. The collectives work on contiguous buffers of one dtype on one device, as
// kernels do (backends/ is below autograd; nn/parallel/collectives.h has the same calls on
// Tensors):
//
//   all_reduce(x)            x = op over ranks of x_r                  (every rank gets it)
//   broadcast(x, root)       x = x_root
//   all_gather(in, out)      out[r*n : (r+1)*n] = in_r                 (in: n, out: size*n)
//   reduce_scatter(in, out)  out_r = (op over ranks of in)[r*n : (r+1)*n]   (in: size*n, out: n)
//   barrier()                returns when every rank has called it
//
// Average is Sum divided by size. Every rank must call the same collectives in the same order
// (MPI's rule): a rank that skips one leaves the others waiting.
//
// Implementations: SingleProcess (a world of one: every collective is a copy or nothing),
// MPI (backends/dist/mpi.cpp: CPU buffers; all_reduce_async is MPI_Iallreduce, so a gradient
// bucket is reduced while backward goes on), NCCL (backends/dist/nccl.cpp: CUDA buffers, on its
// own stream, bootstrapped through MPI: rank 0 makes the ncclUniqueId and broadcasts it).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backends/device.h"
#include "backends/dtype.h"

namespace vitrine::dist {

/// How a collective combines the ranks' values.
enum class ReduceOp : uint8_t { Sum, Average, Max, Min };

/// A collective's view of a buffer: `count` contiguous elements of `dtype` on `device`.
struct Buffer {
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::Float32;
  Device device = kCPU;
};

/// A collective started by an *_async call; wait() returns when its result is in the buffer.
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until the collective is complete (and its result written).
  virtual void wait() = 0;
  /// True when complete (then wait() returns at once); lets MPI progress the transfer.
  virtual bool test() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  /// "single", "mpi" or "nccl".
  virtual std::string backend() const = 0;
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// This process's index among the processes of its machine (picks its GPU).
  int local_rank() const { return local_rank_; }
  bool is_main() const { return rank_ == 0; }

  /// Starts x = op over ranks of x in place; the caller keeps x alive and untouched until wait().
  virtual std::unique_ptr<Work> all_reduce_async(Buffer x, ReduceOp op) = 0;
  void all_reduce(Buffer x, ReduceOp op = ReduceOp::Sum) { all_reduce_async(x, op)->wait(); }
  virtual void broadcast(Buffer x, int root) = 0;
  virtual void all_gather(Buffer in, Buffer out) = 0;
  virtual void reduce_scatter(Buffer in, Buffer out, ReduceOp op) = 0;
  virtual void barrier() = 0;
  /// Ends every process of the job with exit code `code` (MPI_Abort); a world of one exits.
  [[noreturn]] virtual void abort(int code) = 0;

 protected:
  ProcessGroup(int rank, int size, int local_rank)
      : rank_(rank), size_(size), local_rank_(local_rank) {}
  /// Checks the buffers of a collective: contiguous data, one dtype, the counts it needs.
  void check(const char* op, const Buffer& in, const Buffer* out = nullptr,
             int64_t out_per_in = 1) const;

 private:
  int rank_, size_, local_rank_;
};

/// The processes of this job: an MPI group when the program was started by mpirun (or another
/// launcher that sets OMPI_COMM_WORLD_SIZE or PMI_SIZE) and Vitrine was built with
/// MPI; else a world of one. Made on first use; MPI is finalised at exit.
ProcessGroup& world();
/// True when a launcher started this process as one of several (whether or not MPI is built in).
bool launched();
/// Whether this build has the MPI and NCCL implementations.
bool have_mpi();
bool have_nccl();
/// A group over the same processes that reduces CUDA buffers with NCCL, one GPU per process
/// (device cuda:local_rank); made on first use through world() (MPI broadcasts NCCL's id).
/// Throws Error when this build has no NCCL.
ProcessGroup& nccl_world();
/// The group whose collectives work on buffers of `device`: world() for the CPU, nccl_world()
/// for CUDA when the world has more than one process.
ProcessGroup& group_for(Device device);

namespace detail {
/// Makes the MPI group (mpi.cpp; null when built without MPI).
std::unique_ptr<ProcessGroup> make_mpi_group();
std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap);
/// A world of one process.
std::unique_ptr<ProcessGroup> make_single_group();
}  // namespace detail

}  // namespace vitrine::dist
