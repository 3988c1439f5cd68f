// train/metrics: precision, recall, F1 and their macro averages as scikit-learn's
// precision_recall_fscore_support(labels=range(C), zero_division=0), worked out by hand below
// (scikit-learn is not installed here; each expected value has its fraction), the confusion
// matrix, accumulation over batches, the report and the JSON.
#include "test_util.h"
#include "train/metrics.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace tr = vitrine::train;
using ops::from_vector;

namespace {

/// Logits [B, C] whose argmax is pred[i]: 2 at the prediction, 0.1 * j elsewhere (below 2).
Tensor logits_for(const std::vector<int64_t>& pred, int64_t c, DType dtype = kFloat32) {
  std::vector<double> v;
  for (int64_t p : pred)
    for (int64_t j = 0; j < c; ++j) v.push_back(j == p ? 2.0 : 0.1 * static_cast<double>(j));
  return from_vector(v, {static_cast<int64_t>(pred.size()), c}, dtype);
}

Tensor labels_of(const std::vector<int64_t>& y) {
  return from_vector(y, {static_cast<int64_t>(y.size())});
}

// The three-class example: y_true, y_pred, and
//   confusion [true][pred] = [[2, 1, 1], [1, 2, 0], [0, 1, 2]]
const std::vector<int64_t> kTrue = {0, 0, 0, 0, 1, 1, 1, 2, 2, 2};
const std::vector<int64_t> kPred = {0, 0, 1, 2, 1, 1, 0, 2, 2, 1};

}  // namespace

TEST_CASE("metrics: a three-class example worked out by hand") {
  tr::Evaluator ev;
  ev.add(logits_for(kPred, 3), labels_of(kTrue), 5.0);
  const tr::Evaluation e = ev.result();
  CHECK(e.count == 10);
  CHECK(e.confusion == std::vector<std::vector<int64_t>>{{2, 1, 1}, {1, 2, 0}, {0, 1, 2}});
  CHECK(e.accuracy == doctest::Approx(0.6));  // 6 on the diagonal of 10
  CHECK(e.loss == doctest::Approx(0.5));      // 5.0 / 10
  REQUIRE(e.per_class.size() == 3);
  // class 0: tp 2, predicted 3 (column), support 4 (row): P 2/3, R 2/4, F1 2*2/(2*2+1+2) = 4/7
  CHECK(e.per_class[0].precision == doctest::Approx(2.0 / 3));
  CHECK(e.per_class[0].recall == doctest::Approx(0.5));
  CHECK(e.per_class[0].f1 == doctest::Approx(4.0 / 7));
  CHECK(e.per_class[0].support == 4);
  // class 1: tp 2, predicted 4, support 3: P 1/2, R 2/3, F1 4/(4+2+1) = 4/7
  CHECK(e.per_class[1].precision == doctest::Approx(0.5));
  CHECK(e.per_class[1].recall == doctest::Approx(2.0 / 3));
  CHECK(e.per_class[1].f1 == doctest::Approx(4.0 / 7));
  CHECK(e.per_class[1].support == 3);
  // class 2: tp 2, predicted 3, support 3: P 2/3, R 2/3, F1 4/(4+1+1) = 2/3
  CHECK(e.per_class[2].precision == doctest::Approx(2.0 / 3));
  CHECK(e.per_class[2].recall == doctest::Approx(2.0 / 3));
  CHECK(e.per_class[2].f1 == doctest::Approx(2.0 / 3));
  CHECK(e.per_class[2].support == 3);
  // macro: P (2/3 + 1/2 + 2/3) / 3 = 11/18, R (1/2 + 2/3 + 2/3) / 3 = 11/18,
  // F1 (4/7 + 4/7 + 2/3) / 3 = 38/63 (the mean of the F1s, not the F1 of the means)
  CHECK(e.macro_precision == doctest::Approx(11.0 / 18));
  CHECK(e.macro_recall == doctest::Approx(11.0 / 18));
  CHECK(e.macro_f1 == doctest::Approx(38.0 / 63));
}

TEST_CASE("metrics: classes never predicted or without examples count as 0 (zero_division=0)") {
  // Four classes; class 2 has examples but is never predicted, class 3 has neither.
  //   confusion = [[1, 0, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
  tr::Evaluator ev(4);
  ev.add(logits_for({0, 1, 0, 1}, 4), labels_of({0, 1, 2, 2}), 0.0);
  const tr::Evaluation e = ev.result();
  CHECK(e.accuracy == doctest::Approx(0.5));
  // classes 0 and 1: tp 1, predicted 2, support 1: P 1/2, R 1, F1 2/(2+1+0) = 2/3
  for (int k : {0, 1}) {
    CHECK(e.per_class[k].precision == doctest::Approx(0.5));
    CHECK(e.per_class[k].recall == doctest::Approx(1.0));
    CHECK(e.per_class[k].f1 == doctest::Approx(2.0 / 3));
  }
  // class 2: never predicted: P 0 (0/0), R 0/2 = 0, F1 0/(0+0+2) = 0
  CHECK(e.per_class[2].precision == 0);
  CHECK(e.per_class[2].recall == 0);
  CHECK(e.per_class[2].f1 == 0);
  CHECK(e.per_class[2].support == 2);
  // class 3: 0/0 everywhere, all 0, and still in the macro averages (labels=range(4))
  CHECK(e.per_class[3].precision == 0);
  CHECK(e.per_class[3].recall == 0);
  CHECK(e.per_class[3].f1 == 0);
  CHECK(e.per_class[3].support == 0);
  CHECK(e.macro_precision == doctest::Approx(0.25));  // (1/2 + 1/2 + 0 + 0) / 4
  CHECK(e.macro_recall == doctest::Approx(0.5));      // (1 + 1 + 0 + 0) / 4
  CHECK(e.macro_f1 == doctest::Approx(1.0 / 3));      // (2/3 + 2/3) / 4
}

TEST_CASE("metrics: batches accumulate as one, on float64 logits too, and reset forgets") {
  tr::Evaluator whole, parts;
  whole.add(logits_for(kPred, 3), labels_of(kTrue), 5.0);
  const std::vector<int64_t> p1(kPred.begin(), kPred.begin() + 4),
      p2(kPred.begin() + 4, kPred.end());
  const std::vector<int64_t> t1(kTrue.begin(), kTrue.begin() + 4),
      t2(kTrue.begin() + 4, kTrue.end());
  parts.add(logits_for(p1, 3, kFloat64), labels_of(t1), 3.0);
  parts.add(logits_for({}, 3), from_vector(std::vector<int64_t>{}), 0.0);  // an empty batch
  parts.add(logits_for(p2, 3), labels_of(t2), 2.0);
  CHECK(parts.count() == 10);
  CHECK(parts.result().to_json() == whole.result().to_json());

  parts.reset();
  CHECK(parts.count() == 0);
  CHECK(parts.num_classes() == 0);
  parts.add(logits_for({1, 1}, 2), labels_of({1, 0}), 1.0);  // another number of classes now
  CHECK(parts.result().accuracy == doctest::Approx(0.5));
  CHECK(parts.result().loss == doctest::Approx(0.5));
}

TEST_CASE("metrics: perfect predictions, no examples, and ties going to the first class") {
  tr::Evaluator perfect;
  perfect.add(logits_for({0, 1, 2, 2}, 3), labels_of({0, 1, 2, 2}), 0.4);
  const tr::Evaluation p = perfect.result();
  CHECK(p.accuracy == 1.0);
  CHECK(p.macro_precision == 1.0);
  CHECK(p.macro_recall == 1.0);
  CHECK(p.macro_f1 == 1.0);
  CHECK(p.loss == doctest::Approx(0.1));

  const tr::Evaluation none = tr::Evaluator().result();
  CHECK(none.count == 0);
  CHECK(none.accuracy == 0);
  CHECK(none.per_class.empty());
  const tr::Evaluation none3 = tr::Evaluator(3).result();
  CHECK(none3.per_class.size() == 3);
  CHECK(none3.macro_f1 == 0);
  CHECK(none3.confusion == std::vector<std::vector<int64_t>>(3, std::vector<int64_t>(3, 0)));

  tr::Evaluator ties;  // argmax of [1, 1, 0] is 0, of [0, 2, 2] is 1
  ties.add(from_vector(std::vector<double>{1, 1, 0, 0, 2, 2}, {2, 3}), labels_of({0, 2}), 0);
  CHECK(ties.result().confusion ==
        std::vector<std::vector<int64_t>>{{1, 0, 0}, {0, 0, 0}, {0, 1, 0}});
}

TEST_CASE("metrics: bad batches are errors naming what was given") {
  tr::Evaluator ev;
  CHECK_ERROR_CONTAINS(ev.add(from_vector(std::vector<double>{1, 2, 3}), labels_of({0}), 0),
                       "logits must be [B, C]", "[3]");
  CHECK_ERROR_CONTAINS(ev.add(logits_for({0, 1}, 3), labels_of({0}), 0), "labels must be [B] = [2]",
                       "got shape [1]");
  CHECK_ERROR_CONTAINS(ev.add(logits_for({0}, 3), from_vector(std::vector<double>{0}, {1}), 0),
                       "labels must be int64, got float32");
  CHECK_ERROR_CONTAINS(ev.add(logits_for({0, 1}, 3), labels_of({0, 3}), 0),
                       "label 3 at position 1 is outside [0, 3)");
  CHECK_ERROR_CONTAINS(ev.add(logits_for({0}, 3), labels_of({-1}), 0), "label -1");
  ev.add(logits_for({0}, 3), labels_of({0}), 0);
  CHECK_ERROR_CONTAINS(ev.add(logits_for({0}, 4), labels_of({0}), 0),
                       "logits have 4 classes, earlier ones 3");
  CHECK(ev.count() == 1);  // the bad batches added nothing
  CHECK_ERROR_CONTAINS(tr::Evaluator(4).add(logits_for({0}, 3), labels_of({0}), 0),
                       "logits have 3 classes, earlier ones 4");
  CHECK_ERROR_CONTAINS(tr::Evaluator(0), "num_classes must be >= 1");
  CHECK_ERROR_CONTAINS(ev.result().table({"a", "b"}), "2 class names for 3 classes");
}

TEST_CASE("metrics: to_json holds every number, with class names when given") {
  tr::Evaluator ev;
  ev.add(logits_for(kPred, 3), labels_of(kTrue), 5.0);
  const tr::Evaluation e = ev.result();
  const json j = e.to_json({"cat", "dog", "eel"});
  CHECK(j["count"] == 10);
  CHECK(j["accuracy"].get<double>() == doctest::Approx(0.6));
  CHECK(j["loss"].get<double>() == doctest::Approx(0.5));
  CHECK(j["macro_f1"].get<double>() == doctest::Approx(38.0 / 63));
  CHECK(j["macro_precision"].get<double>() == doctest::Approx(11.0 / 18));
  CHECK(j["macro_recall"].get<double>() == doctest::Approx(11.0 / 18));
  CHECK(j["confusion"] == json{{2, 1, 1}, {1, 2, 0}, {0, 1, 2}});
  CHECK(j["classes"] == json{"cat", "dog", "eel"});
  CHECK(j["per_class"][1]["class"] == "dog");
  CHECK(j["per_class"][1]["precision"].get<double>() == doctest::Approx(0.5));
  CHECK(j["per_class"][1]["support"] == 3);
  CHECK_FALSE(e.to_json().contains("classes"));
  CHECK_FALSE(e.to_json()["per_class"][0].contains("class"));
}

TEST_CASE("metrics: the printed report and confusion matrix") {
  tr::Evaluator ev;
  ev.add(logits_for(kPred, 3), labels_of(kTrue), 5.0);
  const std::string t = ev.result().table({"cat", "dog", "T-shirt/top"});
  const std::string expected =
      "             precision    recall  f1-score   support\n"
      "\n"
      "        cat     0.6667    0.5000    0.5714         4\n"
      "        dog     0.5000    0.6667    0.5714         3\n"
      "T-shirt/top     0.6667    0.6667    0.6667         3\n"
      "\n"
      "   accuracy                         0.6000        10\n"
      "  macro avg     0.6111    0.6111    0.6032        10\n"
      "  mean loss     0.5000\n"
      "\n"
      "confusion matrix (rows: true class, columns: predicted class)\n"
      "               0  1  2\n"
      "0 cat          2  1  1\n"
      "1 dog          1  2  0\n"
      "2 T-shirt/top  0  1  2\n";
  CHECK(t == expected);
  // Without names, the indices name the classes.
  CHECK(ev.result().table().find("\n        2     0.6667") != std::string::npos);

  tr::Evaluator many(25);  // too wide to print the matrix
  many.add(logits_for({3}, 25), labels_of({3}), 0);
  const std::string m = many.result().table();
  CHECK(m.find("confusion matrix: 25 x 25 (not printed for more than 20 classes)") !=
        std::string::npos);
}
