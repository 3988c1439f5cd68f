// Classification metrics of an evaluation: accuracy, mean loss, per-class precision, recall and
// F1 with their macro averages, and the confusion matrix. With C classes, conf[t][p] examples of
// true class t predicted as p, and for class k: tp = conf[k][k], fp = sum_t conf[t][k] - tp,
// fn = support - tp, support = sum_p conf[k][p]:
//   precision = tp / (tp + fp)          (0 for a class never predicted)
//   recall    = tp / (tp + fn)          (0 for a class without examples)
//   f1        = 2 tp / (2 tp + fp + fn) (0 when that is 0 / 0)
//   macro_*   = the mean over all C classes, present or not
// which is scikit-learn's precision_recall_fscore_support(y_true, y_pred, labels=range(C),
// zero_division=0) and its average="macro".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/tensor.h"
#include "backends/dist/process_group.h"

namespace vitrine::train {

struct ClassMetrics {
  double precision = 0, recall = 0, f1 = 0;
  int64_t support = 0;  // examples of this class
};

struct Evaluation {
  int64_t count = 0;    // examples seen
  double accuracy = 0;  // correct / count (0 without examples)
  double loss = 0;      // sum of the per-example losses / count (0 without examples)
  std::vector<ClassMetrics> per_class;
  double macro_precision = 0, macro_recall = 0, macro_f1 = 0;
  std::vector<std::vector<int64_t>> confusion;  // [true][pred], C x C

  /// {"count", "accuracy", "loss", "macro_precision", "macro_recall", "macro_f1",
  ///  "per_class": [{"precision", "recall", "f1", "support"}...], "confusion": [[...]...]};
  /// with class names (one per class) also "classes": [...] and "class" in each per_class entry.
  nlohmann::json to_json(const std::vector<std::string>& class_names = {}) const;

  /// A printable report as scikit-learn's classification_report (4 digits): one row per class,
  /// accuracy, macro average and mean loss, then the confusion matrix (rows: true class,
  /// columns: predicted class by index) when there are at most 20 classes. class_names: one per
  /// class, or empty for the class indices.
  std::string table(const std::vector<std::string>& class_names = {}) const;
};

/// Accumulates batches of predictions: add() per batch, result() at the end.
class Evaluator {
 public:
  /// The number of classes is taken from the first batch's logits.
  Evaluator() = default;
  /// A fixed number of classes (every batch's logits must have it).
  explicit Evaluator(int64_t num_classes);

  /// logits [B, C] (float, any device), labels [B] int64 in [0, C); batch_loss_sum: the sum of
  /// the batch's per-example losses (a mean loss times B). The prediction is the first argmax.
  void add(const Tensor& logits, const Tensor& labels, double batch_loss_sum);
  /// The metrics of everything added so far.
  Evaluation result() const;
  /// Forgets everything added (the number of classes too, unless fixed at construction).
  void reset();
  /// Sums the confusion matrices, counts and losses of every rank of `group` (a collective: each
  /// rank calls it once, after adding its shard), so that result() is that of the whole data.
  void all_reduce(dist::ProcessGroup& group);

  int64_t count() const { return count_; }
  int64_t num_classes() const { return num_classes_; }

 private:
  bool fixed_ = false;
  int64_t num_classes_ = 0;
  int64_t count_ = 0;
  double loss_sum_ = 0;
  std::vector<std::vector<int64_t>> confusion_;
};

}  // namespace vitrine::train
