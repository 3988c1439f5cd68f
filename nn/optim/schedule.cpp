// Learning-rate schedules (see schedule.h for the formulas).
#include "nn/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace vitrine::nn::optim {

namespace {
void check_step(const Schedule& s, int64_t step) {
  VT_CHECK(step >= 0, "{} schedule: step must be >= 0, got {}", s.type_name(), step);
}
}  // namespace

void Schedule::apply(Optimizer& opt, int64_t step) const { opt.scale_lr(factor(step)); }

double ConstantSchedule::factor(int64_t step) const {
  check_step(*this, step);
  return 1.0;
}

nlohmann::json ConstantSchedule::state_json() const { return {{"type", type_name()}}; }

StepSchedule::StepSchedule(int64_t step_size, double gamma) : step_size_(step_size), gamma_(gamma) {
  VT_CHECK(step_size > 0, "step schedule: step_size must be > 0, got {}", step_size);
  VT_CHECK(gamma >= 0, "step schedule: gamma must be >= 0, got {}", gamma);
}

double StepSchedule::factor(int64_t step) const {
  check_step(*this, step);
  return std::pow(gamma_, static_cast<double>(step / step_size_));
}

nlohmann::json StepSchedule::state_json() const {
  return {{"type", type_name()}, {"step_size", step_size_}, {"gamma", gamma_}};
}

WarmupCosineSchedule::WarmupCosineSchedule(int64_t warmup_steps, int64_t total_steps,
                                           double min_factor)
    : warmup_steps_(warmup_steps), total_steps_(total_steps), min_factor_(min_factor) {
  VT_CHECK(warmup_steps >= 0 && warmup_steps <= total_steps,
           "warmup_cosine schedule: need 0 <= warmup_steps <= total_steps, got warmup_steps {} "
           "and total_steps {}",
           warmup_steps, total_steps);
  VT_CHECK(min_factor >= 0 && min_factor <= 1,
           "warmup_cosine schedule: min_factor must be in [0, 1], got {}", min_factor);
}

double WarmupCosineSchedule::factor(int64_t step) const {
  check_step(*this, step);
  if (step < warmup_steps_) return static_cast<double>(step) / static_cast<double>(warmup_steps_);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_steps_) /
                        static_cast<double>(std::max<int64_t>(1, total_steps_ - warmup_steps_)));
  return min_factor_ + (1 - min_factor_) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

nlohmann::json WarmupCosineSchedule::state_json() const {
  return {{"type", type_name()},
          {"warmup_steps", warmup_steps_},
          {"total_steps", total_steps_},
          {"min_factor", min_factor_}};
}

std::unique_ptr<Schedule> schedule_from_json(const nlohmann::json& j) {
  try {
    const std::string type = j.at("type").get<std::string>();
    if (type == "constant") return std::make_unique<ConstantSchedule>();
    if (type == "step")
      return std::make_unique<StepSchedule>(j.at("step_size").get<int64_t>(),
                                            j.at("gamma").get<double>());
    if (type == "warmup_cosine")
      return std::make_unique<WarmupCosineSchedule>(j.at("warmup_steps").get<int64_t>(),
                                                    j.at("total_steps").get<int64_t>(),
                                                    j.at("min_factor").get<double>());
    fail(
        "schedule_from_json: unknown schedule type \"{}\" (expected constant, step or "
        "warmup_cosine)",
        type);
  } catch (const nlohmann::json::exception& e) {
    fail("schedule_from_json: malformed schedule JSON {}: {}", j.dump(), e.what());
  }
}

}  // namespace vitrine::nn::optim
