// Grad mode: when off, ops record no graph (inference, optimizer steps, backward itself unless
// create_graph). Per thread, as in PyTorch.
#pragma once

namespace vitrine {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool on);
};

/// RAII: grad mode off in this scope (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// RAII: grad mode set to `on` in this scope (torch.set_grad_enabled(on)).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool on) : prev_(GradMode::is_enabled()) { GradMode::set_enabled(on); }
  ~GradModeGuard() { GradMode::set_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace vitrine
