// Learning-rate schedules (see schedule.h for the formulas).
#include "nn/optim/schedule.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <utility>

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

MultiStepSchedule::MultiStepSchedule(std::vector<int64_t> milestones, double gamma)
    : milestones_(std::move(milestones)), gamma_(gamma) {
  VT_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()),
           "multistep schedule: milestones must be increasing, got [{}]",
           fmt::join(milestones_, ", "));
  VT_CHECK(gamma >= 0, "multistep schedule: gamma must be >= 0, got {}", gamma);
}

double MultiStepSchedule::factor(int64_t step) const {
  check_step(*this, step);
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), step) -
                      milestones_.begin();  // bisect_right
  return std::pow(gamma_, static_cast<double>(passed));
}

nlohmann::json MultiStepSchedule::state_json() const {
  return {{"type", type_name()}, {"milestones", milestones_}, {"gamma", gamma_}};
}

ExponentialSchedule::ExponentialSchedule(double gamma) : gamma_(gamma) {
  VT_CHECK(gamma >= 0, "exponential schedule: gamma must be >= 0, got {}", gamma);
}

double ExponentialSchedule::factor(int64_t step) const {
  check_step(*this, step);
  return std::pow(gamma_, static_cast<double>(step));
}

nlohmann::json ExponentialSchedule::state_json() const {
  return {{"type", type_name()}, {"gamma", gamma_}};
}

LambdaSchedule::LambdaSchedule(std::function<double(int64_t)> f) : f_(std::move(f)) {
  VT_CHECK(static_cast<bool>(f_), "lambda schedule: needs a function of the step");
}

double LambdaSchedule::factor(int64_t step) const {
  check_step(*this, step);
  return f_(step);
}

nlohmann::json LambdaSchedule::state_json() const { return {{"type", type_name()}}; }

OneCycleSchedule::OneCycleSchedule(int64_t total_steps, double pct_start,
                                   const std::string& anneal_strategy, double div_factor,
                                   double final_div_factor, bool three_phase)
    : total_steps_(total_steps),
      pct_start_(pct_start),
      anneal_(anneal_strategy),
      div_factor_(div_factor),
      final_div_factor_(final_div_factor),
      three_phase_(three_phase) {
  VT_CHECK(total_steps > 0, "onecycle schedule: total_steps must be > 0, got {}", total_steps);
  VT_CHECK(pct_start >= 0 && pct_start <= 1,
           "onecycle schedule: pct_start must be in [0, 1], got {}", pct_start);
  VT_CHECK(anneal_ == "cos" || anneal_ == "linear",
           "onecycle schedule: anneal_strategy must be cos or linear, got '{}'", anneal_);
  VT_CHECK(div_factor > 0 && final_div_factor > 0,
           "onecycle schedule: div_factor and final_div_factor must be > 0, got {} and {}",
           div_factor, final_div_factor);
}

double OneCycleSchedule::factor(int64_t step) const {
  check_step(*this, step);
  VT_CHECK(step < total_steps_,
           "onecycle schedule: step {} is past the last of total_steps {} (steps 0 to {})", step,
           total_steps_, total_steps_ - 1);
  const double initial = 1 / div_factor_, min = initial / final_div_factor_;
  const double total = static_cast<double>(total_steps_);
  struct Phase {
    double end, start_f, end_f;
  };
  std::vector<Phase> phases;
  if (three_phase_)
    phases = {{pct_start_ * total - 1, initial, 1},
              {2 * pct_start_ * total - 2, 1, initial},
              {total - 1, initial, min}};
  else
    phases = {{pct_start_ * total - 1, initial, 1}, {total - 1, 1, min}};
  const double s = static_cast<double>(step);
  double start = 0;
  for (size_t i = 0; i < phases.size(); ++i) {
    const Phase& p = phases[i];
    if (s <= p.end || i + 1 == phases.size()) {
      const double t = (s - start) / (p.end - start);
      if (anneal_ == "cos")
        return p.end_f + (p.start_f - p.end_f) / 2.0 * (std::cos(std::numbers::pi * t) + 1);
      return (p.end_f - p.start_f) * t + p.start_f;
    }
    start = p.end;
  }
  return min;  // not reached
}

nlohmann::json OneCycleSchedule::state_json() const {
  return {{"type", type_name()},        {"total_steps", total_steps_},
          {"pct_start", pct_start_},    {"anneal_strategy", anneal_},
          {"div_factor", div_factor_},  {"final_div_factor", final_div_factor_},
          {"three_phase", three_phase_}};
}

ReduceLROnPlateau::ReduceLROnPlateau(const Options& o) : o_(o) {
  VT_CHECK(o.mode == "min" || o.mode == "max",
           "ReduceLROnPlateau: mode must be min or max, got '{}'", o.mode);
  VT_CHECK(o.threshold_mode == "rel" || o.threshold_mode == "abs",
           "ReduceLROnPlateau: threshold_mode must be rel or abs, got '{}'", o.threshold_mode);
  VT_CHECK(o.factor < 1 && o.factor >= 0, "ReduceLROnPlateau: factor must be in [0, 1), got {}",
           o.factor);
  VT_CHECK(o.patience >= 0 && o.cooldown >= 0 && o.min_lr >= 0,
           "ReduceLROnPlateau: patience, cooldown and min_lr must be >= 0");
  best_ = o.mode == "min" ? std::numeric_limits<double>::infinity()
                          : -std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::better(double a, double best) const {
  const bool rel = o_.threshold_mode == "rel";
  if (o_.mode == "min") return a < (rel ? best * (1 - o_.threshold) : best - o_.threshold);
  return a > (rel ? best * (o_.threshold + 1) : best + o_.threshold);
}

bool ReduceLROnPlateau::step(Optimizer& opt, double metric) {
  ++last_epoch_;
  if (better(metric, best_)) {
    best_ = metric;
    num_bad_ = 0;
  } else {
    ++num_bad_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_ = 0;  // ignore bad epochs in cooldown
  }
  if (num_bad_ <= o_.patience) return false;
  bool reduced = false;
  for (ParamGroup& g : opt.param_groups()) {
    const double lr = std::max(g.lr * o_.factor, o_.min_lr);
    if (g.lr - lr > o_.eps) {
      g.lr = lr;
      reduced = true;
    }
  }
  cooldown_counter_ = o_.cooldown;
  num_bad_ = 0;
  return reduced;
}

nlohmann::json ReduceLROnPlateau::state_json() const {
  return {{"type", "reduce_on_plateau"},
          {"mode", o_.mode},
          {"factor", o_.factor},
          {"patience", o_.patience},
          {"threshold", o_.threshold},
          {"threshold_mode", o_.threshold_mode},
          {"cooldown", o_.cooldown},
          {"min_lr", o_.min_lr},
          {"eps", o_.eps},
          {"best", best_},
          {"num_bad_epochs", num_bad_},
          {"cooldown_counter", cooldown_counter_},
          {"last_epoch", last_epoch_}};
}

void ReduceLROnPlateau::load_state(const nlohmann::json& j) {
  try {
    Options o;
    o.mode = j.at("mode").get<std::string>();
    o.factor = j.at("factor").get<double>();
    o.patience = j.at("patience").get<int64_t>();
    o.threshold = j.at("threshold").get<double>();
    o.threshold_mode = j.at("threshold_mode").get<std::string>();
    o.cooldown = j.at("cooldown").get<int64_t>();
    o.min_lr = j.at("min_lr").get<double>();
    o.eps = j.at("eps").get<double>();
    ReduceLROnPlateau fresh(o);                                             // checks the options
    if (!j.at("best").is_null()) fresh.best_ = j.at("best").get<double>();  // null: +-inf
    fresh.num_bad_ = j.at("num_bad_epochs").get<int64_t>();
    fresh.cooldown_counter_ = j.at("cooldown_counter").get<int64_t>();
    fresh.last_epoch_ = j.at("last_epoch").get<int64_t>();
    *this = fresh;
  } catch (const nlohmann::json::exception& e) {
    fail("ReduceLROnPlateau: load_state: malformed state JSON {}: {}", j.dump(), e.what());
  }
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
    if (type == "multistep")
      return std::make_unique<MultiStepSchedule>(j.at("milestones").get<std::vector<int64_t>>(),
                                                 j.at("gamma").get<double>());
    if (type == "exponential")
      return std::make_unique<ExponentialSchedule>(j.at("gamma").get<double>());
    if (type == "onecycle")
      return std::make_unique<OneCycleSchedule>(
          j.at("total_steps").get<int64_t>(), j.at("pct_start").get<double>(),
          j.at("anneal_strategy").get<std::string>(), j.at("div_factor").get<double>(),
          j.at("final_div_factor").get<double>(), j.at("three_phase").get<bool>());
    VT_CHECK(type != "lambda",
             "schedule_from_json: a lambda schedule's function cannot be read back from JSON; "
             "build the LambdaSchedule again in code");
    fail(
        "schedule_from_json: unknown schedule type \"{}\" (expected constant, step, "
        "warmup_cosine, multistep, exponential or onecycle)",
        type);
  } catch (const nlohmann::json::exception& e) {
    fail("schedule_from_json: malformed schedule JSON {}: {}", j.dump(), e.what());
  }
}

}  // namespace vitrine::nn::optim
