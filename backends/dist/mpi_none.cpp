// A build without MPI: every process is a world of one (process_group.h).
#include "backends/dist/process_group.h"

namespace vitrine::dist {

bool have_mpi() { return false; }

namespace detail {
std::unique_ptr<ProcessGroup> make_mpi_group() { return nullptr; }
}  // namespace detail

}  // namespace vitrine::dist
