// A build without NCCL (no CUDA, or no nccl.h): GPU buffers have no process group.
#include "backends/dist/process_group.h"
#include "backends/error.h"

namespace vitrine::dist {

bool have_nccl() { return false; }

namespace detail {
std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup&) {
  fail(
      "dist: this build has no NCCL (it needs the CUDA backend and NCCL's nccl.h and "
      "libnccl from the CUDA toolkit): GPU tensors cannot be reduced across processes");
}
}  // namespace detail

}  // namespace vitrine::dist
