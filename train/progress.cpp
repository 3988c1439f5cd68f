// Progress: see progress.h.
#include "train/progress.h"

#include <cmath>

#include <fmt/format.h>

namespace vitrine::train {

Progress::Progress(std::FILE* out, bool tty, int64_t epochs, int64_t log_every)
    : out_(out), tty_(tty), epochs_(epochs), log_every_(log_every) {}

std::string Progress::duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string Progress::bar(int64_t done, int64_t total, int width) {
  const int filled = total > 0
                         ? static_cast<int>(static_cast<double>(width) * static_cast<double>(done) /
                                            static_cast<double>(total))
                         : 0;
  std::string b = "[";
  for (int i = 0; i < width; ++i) b += i < filled ? '=' : (i == filled && done < total ? '>' : '.');
  return b + "]";
}

std::string Progress::line(const StepInfo& info) const {
  // Rates from the steps' own times: evaluations and checkpoints do not slow the numbers down.
  const double wall = seconds_;
  const double per_step = steps_ > 0 ? wall / static_cast<double>(steps_) : 0;
  const double eta = per_step * static_cast<double>(info.steps_per_epoch - info.step);
  const double ips = wall > 0 ? static_cast<double>(examples_) / wall : 0;
  const std::string where = tty_ ? bar(info.step, info.steps_per_epoch, 20) : std::string("step");
  return fmt::format(
      "epoch {}/{} {} {}/{} loss {:.4f} acc {:.1f}% {:.0f} img/s lr {:.1e} {} {}", info.epoch + 1,
      epochs_, where, info.step, info.steps_per_epoch,
      loss_sum_ / static_cast<double>(std::max<int64_t>(steps_, 1)),
      100.0 * static_cast<double>(correct_) / static_cast<double>(std::max<int64_t>(examples_, 1)),
      ips, last_lr_, info.step == info.steps_per_epoch ? "took" : "ETA",
      duration(info.step == info.steps_per_epoch ? wall : eta));
}

void Progress::print_evaluations(const StepInfo& info) {
  if (info.validation)
    fmt::print(out_, "  validation: loss {:.4f} accuracy {:.2f}% macro F1 {:.4f}\n",
               info.validation->loss, 100 * info.validation->accuracy, info.validation->macro_f1);
  if (info.test)
    fmt::print(
        out_, "  test:       loss {:.4f} accuracy {:.2f}% macro F1 {:.4f} (after {} of training)\n",
        info.test->loss, 100 * info.test->accuracy, info.test->macro_f1,
        duration(info.train_seconds));
}

void Progress::on_step(const StepInfo& info) {
  // The trainer reports the step that ended an epoch with step == steps_per_epoch.
  if (info.epoch != epoch_) {
    epoch_ = info.epoch;
    last_draw_ = Clock::time_point{};
    loss_sum_ = seconds_ = 0;
    steps_ = correct_ = examples_ = 0;
  }
  loss_sum_ += info.loss;
  seconds_ += info.step_seconds;
  ++steps_;
  correct_ += info.correct;
  examples_ += info.examples;
  last_lr_ = info.lr;
  const bool epoch_end = info.step == info.steps_per_epoch;
  const auto now = Clock::now();
  if (tty_) {
    if (epoch_end || info.validation || now - last_draw_ >= std::chrono::milliseconds(200)) {
      fmt::print(out_, "\r\033[K{}", line(info));
      open_ = true;
      last_draw_ = now;
    }
    if (epoch_end || info.validation) {
      fmt::print(out_, "\n");
      open_ = false;
    }
  } else if (epoch_end || info.validation || (log_every_ > 0 && info.step % log_every_ == 0)) {
    fmt::print(out_, "{}\n", line(info));
  }
  print_evaluations(info);
  if (epoch_end) epoch_ = -1;  // the next step starts a new epoch (even when resumed into it)
  std::fflush(out_);
}

void Progress::close() {
  if (open_) fmt::print(out_, "\n");
  open_ = false;
  std::fflush(out_);
}

}  // namespace vitrine::train
