// libvitrine_thread_wait.so: sets Vitrine's default for how idle OpenMP threads wait
// (backends/cpu/thread_wait.h) before libgomp reads its environment. A library of its own, not a
// part of libvitrine.so: libvitrine.so needs libgomp, so libgomp would be initialised first;
// this one needs only libc, and libvitrine.so lists it after libgomp, which makes the dynamic
// loader initialise it before libgomp.
#include <cstdlib>

#include "backends/cpu/thread_wait.h"

namespace {

int applied = 0;

__attribute__((constructor)) void vitrine_thread_wait_default() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr)
    return;  // the user chose
  applied = setenv("GOMP_SPINCOUNT", vitrine::cpu::kDefaultSpinCount, 0) == 0 ? 1 : 0;
}

}  // namespace

extern "C" int vitrine_thread_wait_default_applied() { return applied; }
