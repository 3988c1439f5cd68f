// What vitrine-train writes for TensorBoard (train.tensorboard, on by default): one event file in
// the run folder (tfevents.h), holding every metrics.jsonl line as an event at the line's
// global_step, and the test set's confusion matrix as an image at the run's last step.
//
// Tags: "<group>/<key>" for every number of a line but its position (epoch, step and global_step:
// the event's step is global_step), the group being the line's type: "train" (train/loss,
// train/accuracy, train/lr, train/images_per_second, train/train_seconds, ...), "val" for "eval"
// lines (val/loss, val/accuracy, val/macro_f1, val/best_accuracy, ...), "test", "train_eval".
// Values are written as float32 (TensorBoard's simple_value); a number that is not finite (null
// in metrics.jsonl) is left out.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/tfevents.h"

namespace vitrine::train {

/// The TensorBoard group of a metrics line's "type": "eval" -> "val", others as they are.
std::string tensorboard_group(const std::string& type);

/// A metrics.jsonl line's scalars, tagged as above, in the line's key order.
std::vector<Scalar> metrics_scalars(const nlohmann::json& line);

/// The most classes whose confusion matrix is drawn (1024 x 1024 pixels at one pixel a square).
inline constexpr int64_t kConfusionImageClasses = 1024;

/// An encoded image and its size.
struct EncodedImage {
  std::string png;
  int64_t height = 0, width = 0;
};

/// The confusion matrix ([true][predicted], C x C) as an RGB PNG: row t, column p is a square
/// whose colour goes from white (none of class t's examples predicted as p) to dark blue (all of
/// them), the count divided by the row's; each square is clamp(256 / C, 1, 32) pixels, with a
/// 1-pixel grey grid around squares of 4 pixels or more. At most kConfusionImageClasses classes
/// (an Error beyond: the trainer writes no image then).
EncodedImage confusion_matrix_png(const std::vector<std::vector<int64_t>>& confusion);

}  // namespace vitrine::train
