// Learning-rate schedules: a schedule is a function of the step number (0 for the first update)
// giving a factor; apply(opt, step) sets every group's lr to initial_lr * factor(step). Call it
// before the step it is for:
//   for (int64_t s = 0; s < total; ++s) { schedule.apply(opt, s); ...; opt.step(); }
// which matches PyTorch's LambdaLR stepped after each optimizer.step(). A schedule holds only its
// configuration, which state_json() writes and schedule_from_json() reads back.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "nn/optim/optimizer.h"

namespace vitrine::nn::optim {

class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual std::string type_name() const = 0;
  /// The multiplier of each group's initial_lr at step (>= 0).
  virtual double factor(int64_t step) const = 0;
  /// opt.scale_lr(factor(step)).
  void apply(Optimizer& opt, int64_t step) const;
  /// {"type": type_name(), ...the constructor's arguments}.
  virtual nlohmann::json state_json() const = 0;
};

/// factor = 1
class ConstantSchedule : public Schedule {
 public:
  std::string type_name() const override { return "constant"; }
  double factor(int64_t step) const override;
  nlohmann::json state_json() const override;
};

/// factor = gamma ^ floor(step / step_size)   (torch.optim.lr_scheduler.StepLR)
class StepSchedule : public Schedule {
 public:
  StepSchedule(int64_t step_size, double gamma = 0.1);
  std::string type_name() const override { return "step"; }
  double factor(int64_t step) const override;
  nlohmann::json state_json() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// Linear warm-up from 0, then cosine decay to min_factor (timm's / Hugging Face's
/// get_cosine_schedule_with_warmup, with a floor):
///   step < warmup_steps:  factor = step / warmup_steps
///   otherwise:            progress = min(1, (step - warmup_steps) / max(1, total_steps -
///                         warmup_steps)),
///                         factor = min_factor + (1 - min_factor) * 0.5 * (1 + cos(pi * progress))
/// so factor(0) = 0, factor(warmup_steps) = 1, and factor = min_factor from total_steps on.
class WarmupCosineSchedule : public Schedule {
 public:
  WarmupCosineSchedule(int64_t warmup_steps, int64_t total_steps, double min_factor = 0);
  std::string type_name() const override { return "warmup_cosine"; }
  double factor(int64_t step) const override;
  nlohmann::json state_json() const override;

 private:
  int64_t warmup_steps_, total_steps_;
  double min_factor_;
};

/// Rebuilds a schedule from its state_json(); throws naming an unknown type or a missing field.
std::unique_ptr<Schedule> schedule_from_json(const nlohmann::json& j);

}  // namespace vitrine::nn::optim
