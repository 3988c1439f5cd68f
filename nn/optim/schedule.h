// Learning-rate schedules: a schedule is a function of the step number (0 for the first update)
// giving a factor; apply(opt, step) sets every group's lr to initial_lr * factor(step). Call it
// before the step it is for:
//   for (int64_t s = 0; s < total; ++s) { schedule.apply(opt, s); ...; opt.step(); }
// which matches PyTorch's LambdaLR stepped after each optimizer.step(). A schedule holds only its
// configuration, which state_json() writes and schedule_from_json() reads back. PyTorch's names:
// StepLR is StepSchedule, MultiStepLR MultiStepSchedule, ExponentialLR ExponentialSchedule,
// LambdaLR LambdaSchedule, OneCycleLR OneCycleSchedule; ReduceLROnPlateau follows a metric.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

/// factor = gamma ^ (the number of milestones <= step)   (torch.optim.lr_scheduler.MultiStepLR;
/// milestones increasing)
class MultiStepSchedule : public Schedule {
 public:
  MultiStepSchedule(std::vector<int64_t> milestones, double gamma = 0.1);
  std::string type_name() const override { return "multistep"; }
  double factor(int64_t step) const override;
  nlohmann::json state_json() const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

/// factor = gamma ^ step   (torch.optim.lr_scheduler.ExponentialLR)
class ExponentialSchedule : public Schedule {
 public:
  explicit ExponentialSchedule(double gamma);
  std::string type_name() const override { return "exponential"; }
  double factor(int64_t step) const override;
  nlohmann::json state_json() const override;

 private:
  double gamma_;
};

/// factor = f(step)   (torch.optim.lr_scheduler.LambdaLR). Its state_json() is {"type":
/// "lambda"}: a function cannot be written, so schedule_from_json refuses it (rebuild it in code).
class LambdaSchedule : public Schedule {
 public:
  explicit LambdaSchedule(std::function<double(int64_t)> f);
  std::string type_name() const override { return "lambda"; }
  double factor(int64_t step) const override;
  nlohmann::json state_json() const override;

 private:
  std::function<double(int64_t)> f_;
};

/// torch.optim.lr_scheduler.OneCycleLR (Smith & Topin 2017) with the group's lr as max_lr and
/// cycle_momentum off (momentum is not cycled). With i = initial = 1 / div_factor and
/// m = min = i / final_div_factor, the factor anneals (cos: end + (start - end) (1 + cos(pi t)) /
/// 2; linear: start + (end - start) t) over phases ending at these steps:
///   two phases:   i -> 1 until pct_start total - 1, then 1 -> m until total - 1;
///   three_phase:  i -> 1 until pct_start total - 1, 1 -> i until 2 pct_start total - 2,
///                 then i -> m until total - 1;
/// t = (step - the phase's start) / (its end - its start). A step past total_steps - 1 is an error,
/// as in PyTorch.
class OneCycleSchedule : public Schedule {
 public:
  OneCycleSchedule(int64_t total_steps, double pct_start = 0.3,
                   const std::string& anneal_strategy = "cos", double div_factor = 25,
                   double final_div_factor = 1e4, bool three_phase = false);
  std::string type_name() const override { return "onecycle"; }
  double factor(int64_t step) const override;
  nlohmann::json state_json() const override;

 private:
  int64_t total_steps_;
  double pct_start_;
  std::string anneal_;
  double div_factor_, final_div_factor_;
  bool three_phase_;
};

/// torch.optim.lr_scheduler.ReduceLROnPlateau: not a function of the step but of a metric.
/// step(opt, metric) after each evaluation: when the metric has not improved on the best by
/// threshold (rel: best (1 -+ threshold); abs: best -+ threshold, for mode "min" / "max") for
/// more than patience calls, every group's lr becomes max(lr factor, min_lr) (a change under eps
/// is skipped), then cooldown calls pass without counting.
class ReduceLROnPlateau {
 public:
  struct Options {
    std::string mode = "min";
    double factor = 0.1;
    int64_t patience = 10;
    double threshold = 1e-4;
    std::string threshold_mode = "rel";
    int64_t cooldown = 0;
    double min_lr = 0;
    double eps = 1e-8;
  };
  ReduceLROnPlateau() : ReduceLROnPlateau(Options{}) {}
  explicit ReduceLROnPlateau(const Options& options);
  /// Records metric; reduces the lrs of opt when the plateau is long enough. Returns whether it
  /// reduced them.
  bool step(Optimizer& opt, double metric);
  /// {"best", "num_bad_epochs", "cooldown_counter", "last_epoch"} and the options.
  nlohmann::json state_json() const;
  void load_state(const nlohmann::json& j);

 private:
  bool better(double a, double best) const;
  Options o_;
  double best_;
  int64_t num_bad_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

/// Rebuilds a schedule from its state_json(); throws naming an unknown type or a missing field.
std::unique_ptr<Schedule> schedule_from_json(const nlohmann::json& j);

}  // namespace vitrine::nn::optim
