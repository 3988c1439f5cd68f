// vitrine-train's progress display. On a terminal: one live line per epoch, redrawn in place at
// most 5 times a second,
//   epoch 2/10 [=========>..........] 180/422 loss 0.6123 acc 78.4% 231 img/s lr 9.7e-04 ETA 1:05
// then kept as the epoch's summary. Elsewhere (a pipe, a log file): a plain line every log_every
// steps and one per epoch, so logs stay readable. Validation and per-epoch test results are
// printed under the epoch's line.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "train/trainer.h"

namespace vitrine::train {

class Progress {
 public:
  /// out: where to write; tty: live bar (true) or plain lines (false); log_every: steps between
  /// plain lines.
  Progress(std::FILE* out, bool tty, int64_t epochs, int64_t log_every);

  /// Called by the Trainer after each step.
  void on_step(const StepInfo& info);
  /// Ends a live line that is still open (a stop, an error).
  void close();

  /// "1:05" or "1:02:03".
  static std::string duration(double seconds);
  /// "[=====>....]" of `width` characters inside the brackets for done/total.
  static std::string bar(int64_t done, int64_t total, int width);

 private:
  using Clock = std::chrono::steady_clock;
  std::string line(const StepInfo& info) const;
  void print_evaluations(const StepInfo& info);

  std::FILE* out_;
  bool tty_;
  int64_t epochs_, log_every_;
  bool open_ = false;  // a live line is on screen without its newline
  int64_t epoch_ = -1;
  Clock::time_point last_draw_;
  double seconds_ = 0;  // the epoch's steps' time so far
  double loss_sum_ = 0;
  int64_t steps_ = 0, correct_ = 0, examples_ = 0;
  double last_lr_ = 0;
};

}  // namespace vitrine::train
