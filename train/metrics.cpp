// Classification metrics: the confusion-matrix accumulator and the metrics derived from it (see
// metrics.h for the definitions).
#include "train/metrics.h"

#include <cmath>

#include <algorithm>

#include <fmt/format.h>

#include "backends/error.h"
#include "ops/ops.h"

namespace vitrine::train {

namespace {

std::vector<std::string> names_or_indices(const std::vector<std::string>& class_names, size_t c,
                                          const char* what) {
  if (class_names.empty()) {
    std::vector<std::string> out;
    for (size_t k = 0; k < c; ++k) out.push_back(std::to_string(k));
    return out;
  }
  VT_CHECK(class_names.size() == c, "Evaluation::{}: {} class names for {} classes", what,
           class_names.size(), c);
  return class_names;
}

}  // namespace

// ---- Evaluator ---------------------------------------------------------------------------------

Evaluator::Evaluator(int64_t num_classes) : fixed_(true), num_classes_(num_classes) {
  VT_CHECK(num_classes >= 1, "Evaluator: num_classes must be >= 1, got {}", num_classes);
  confusion_.assign(static_cast<size_t>(num_classes),
                    std::vector<int64_t>(static_cast<size_t>(num_classes), 0));
}

void Evaluator::add(const Tensor& logits, const Tensor& labels, double batch_loss_sum) {
  VT_CHECK(logits.defined() && labels.defined(), "Evaluator::add: undefined tensor");
  VT_CHECK(logits.dim() == 2, "Evaluator::add: logits must be [B, C], got shape {}",
           logits.shape());
  VT_CHECK(is_float(logits.dtype()), "Evaluator::add: logits must be floating point, got {}",
           dtype_name(logits.dtype()));
  VT_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0),
           "Evaluator::add: labels must be [B] = [{}] for logits of shape {}, got shape {}",
           logits.size(0), logits.shape(), labels.shape());
  VT_CHECK(labels.dtype() == kInt64, "Evaluator::add: labels must be int64, got {}",
           dtype_name(labels.dtype()));
  const int64_t c = logits.size(1);
  VT_CHECK(c >= 1, "Evaluator::add: logits have no class (shape {})", logits.shape());
  VT_CHECK(std::isfinite(batch_loss_sum),
           "evaluation: the loss is {} on a batch: the model's output is not finite (the weights "
           "or the images hold NaN or inf)",
           batch_loss_sum);
  if (num_classes_ == 0) {
    num_classes_ = c;
    confusion_.assign(static_cast<size_t>(c), std::vector<int64_t>(static_cast<size_t>(c), 0));
  }
  VT_CHECK(c == num_classes_, "Evaluator::add: logits have {} classes, earlier ones {}", c,
           num_classes_);
  const int64_t b = logits.size(0);
  if (b == 0) return;

  const std::vector<int64_t> pred = ops::argmax(logits.detach(), 1).to_vector<int64_t>();
  const std::vector<int64_t> truth = labels.to_vector<int64_t>();
  for (int64_t i = 0; i < b; ++i)
    VT_CHECK(truth[i] >= 0 && truth[i] < c,
             "Evaluator::add: label {} at position {} is outside [0, {})", truth[i], i, c);
  for (int64_t i = 0; i < b; ++i) ++confusion_[truth[i]][pred[i]];
  count_ += b;
  loss_sum_ += batch_loss_sum;
}

void Evaluator::all_reduce(dist::ProcessGroup& group) {
  if (group.size() == 1) return;
  int64_t classes = num_classes_;  // a rank without examples has seen no logits
  group.all_reduce({&classes, 1, kInt64, kCPU}, dist::ReduceOp::Max);
  VT_CHECK(!fixed_ || classes == num_classes_,
           "Evaluator::all_reduce: this rank has {} classes, another {}", num_classes_, classes);
  if (num_classes_ == 0) {
    num_classes_ = classes;
    confusion_.assign(static_cast<size_t>(classes),
                      std::vector<int64_t>(static_cast<size_t>(classes), 0));
  }
  VT_CHECK(classes == num_classes_, "Evaluator::all_reduce: this rank has {} classes, another {}",
           num_classes_, classes);
  const auto c = static_cast<size_t>(classes);
  std::vector<int64_t> counts(c * c + 1);
  for (size_t t = 0; t < c; ++t)
    for (size_t p = 0; p < c; ++p) counts[t * c + p] = confusion_[t][p];
  counts[c * c] = count_;
  group.all_reduce({counts.data(), static_cast<int64_t>(counts.size()), kInt64, kCPU});
  for (size_t t = 0; t < c; ++t)
    for (size_t p = 0; p < c; ++p) confusion_[t][p] = counts[t * c + p];
  count_ = counts[c * c];
  group.all_reduce({&loss_sum_, 1, kFloat64, kCPU});
}

Evaluation Evaluator::result() const {
  Evaluation e;
  e.count = count_;
  e.confusion = confusion_;
  const size_t c = confusion_.size();
  int64_t correct = 0;
  for (size_t k = 0; k < c; ++k) {
    const int64_t tp = confusion_[k][k];
    int64_t predicted = 0, support = 0;
    for (size_t j = 0; j < c; ++j) {
      predicted += confusion_[j][k];
      support += confusion_[k][j];
    }
    const int64_t fp = predicted - tp, fn = support - tp;
    ClassMetrics m;
    m.support = support;
    m.precision = predicted > 0 ? static_cast<double>(tp) / static_cast<double>(predicted) : 0;
    m.recall = support > 0 ? static_cast<double>(tp) / static_cast<double>(support) : 0;
    const int64_t f1_den = 2 * tp + fp + fn;
    m.f1 = f1_den > 0 ? 2.0 * static_cast<double>(tp) / static_cast<double>(f1_den) : 0;
    e.per_class.push_back(m);
    e.macro_precision += m.precision;
    e.macro_recall += m.recall;
    e.macro_f1 += m.f1;
    correct += tp;
  }
  if (c > 0) {
    e.macro_precision /= static_cast<double>(c);
    e.macro_recall /= static_cast<double>(c);
    e.macro_f1 /= static_cast<double>(c);
  }
  if (count_ > 0) {
    e.accuracy = static_cast<double>(correct) / static_cast<double>(count_);
    e.loss = loss_sum_ / static_cast<double>(count_);
  }
  return e;
}

void Evaluator::reset() {
  if (!fixed_) {
    num_classes_ = 0;
    confusion_.clear();
  } else {
    for (auto& row : confusion_) std::fill(row.begin(), row.end(), 0);
  }
  count_ = 0;
  loss_sum_ = 0;
}

// ---- Evaluation --------------------------------------------------------------------------------

nlohmann::json Evaluation::to_json(const std::vector<std::string>& class_names) const {
  if (!class_names.empty()) (void)names_or_indices(class_names, per_class.size(), "to_json");
  nlohmann::json per = nlohmann::json::array();
  for (size_t k = 0; k < per_class.size(); ++k) {
    nlohmann::json m = {{"precision", per_class[k].precision},
                        {"recall", per_class[k].recall},
                        {"f1", per_class[k].f1},
                        {"support", per_class[k].support}};
    if (!class_names.empty()) m["class"] = class_names[k];
    per.push_back(std::move(m));
  }
  nlohmann::json j = {{"count", count},
                      {"accuracy", accuracy},
                      {"loss", loss},
                      {"macro_precision", macro_precision},
                      {"macro_recall", macro_recall},
                      {"macro_f1", macro_f1},
                      {"per_class", std::move(per)},
                      {"confusion", confusion}};
  if (!class_names.empty()) j["classes"] = class_names;
  return j;
}

std::string Evaluation::table(const std::vector<std::string>& class_names) const {
  const size_t c = per_class.size();
  const std::vector<std::string> names = names_or_indices(class_names, c, "table");
  size_t w = std::string("macro avg").size();
  for (const std::string& n : names) w = std::max(w, n.size());

  std::string out = fmt::format("{:>{}}  {:>9} {:>9} {:>9} {:>9}\n\n", "", w, "precision", "recall",
                                "f1-score", "support");
  for (size_t k = 0; k < c; ++k)
    out += fmt::format("{:>{}}  {:>9.4f} {:>9.4f} {:>9.4f} {:>9}\n", names[k], w,
                       per_class[k].precision, per_class[k].recall, per_class[k].f1,
                       per_class[k].support);
  out +=
      fmt::format("\n{:>{}}  {:>9} {:>9} {:>9.4f} {:>9}\n", "accuracy", w, "", "", accuracy, count);
  out += fmt::format("{:>{}}  {:>9.4f} {:>9.4f} {:>9.4f} {:>9}\n", "macro avg", w, macro_precision,
                     macro_recall, macro_f1, count);
  out += fmt::format("{:>{}}  {:>9.4f}\n", "mean loss", w, loss);

  if (c == 0) return out;
  if (c > 20)
    return out + fmt::format("\nconfusion matrix: {} x {} (not printed for more than 20 classes)\n",
                             c, c);
  int64_t most = 0;
  for (const auto& row : confusion)
    for (int64_t v : row) most = std::max(most, v);
  const size_t iw = std::to_string(c - 1).size();
  const size_t cw = std::max(std::to_string(most).size(), iw) + 2;
  out += "\nconfusion matrix (rows: true class, columns: predicted class)\n";
  out += fmt::format("{:>{}}", "", iw + 1 + w);
  for (size_t k = 0; k < c; ++k) out += fmt::format("{:>{}}", k, cw);
  out += "\n";
  for (size_t t = 0; t < c; ++t) {
    out += fmt::format("{:>{}} {:<{}}", t, iw, names[t], w);
    for (size_t p = 0; p < c; ++p) out += fmt::format("{:>{}}", confusion[t][p], cw);
    out += "\n";
  }
  return out;
}

}  // namespace vitrine::train
