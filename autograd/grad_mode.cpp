#include "autograd/grad_mode.h"

namespace vitrine {
namespace {
thread_local bool g_grad_enabled = true;
}
bool GradMode::is_enabled() { return g_grad_enabled; }
void GradMode::set_enabled(bool on) { g_grad_enabled = on; }
}  // namespace vitrine
