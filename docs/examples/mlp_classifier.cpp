// A complete Vitrine program: define a model from nn modules, train it with AdamW and a warm-up +
// cosine schedule, save a checkpoint, load it into a fresh model and check it computes the same.
// docs/nn.md walks through it; the test suite builds and runs it (ctest -R examples/).
#include <vitrine.h>

#include <cstdio>

namespace vt = vitrine;
namespace nn = vitrine::nn;
using vt::Tensor;

// A model is a Module that registers its parts in the constructor and defines forward.
class Classifier : public nn::Module {
 public:
  Classifier(int64_t in, int64_t hidden, int64_t classes, vt::Generator& gen) {
    body = register_module("body", std::make_shared<nn::MLP>(in, hidden, hidden, 0.0, gen));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(hidden));
    head = register_module("head", std::make_shared<nn::Linear>(hidden, classes, true, gen));
  }
  Tensor forward(const Tensor& x) override {
    return head->forward(norm->forward(body->forward(x)));
  }
  std::string type_name() const override { return "Classifier"; }

  std::shared_ptr<nn::MLP> body;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> head;
};

int main() {
  try {
    vt::Generator gen(0);
    // Data: 4 classes, each a Gaussian blob in 8-D around its own centre.
    const int64_t n = 256, dim = 8, classes = 4;
    Tensor centres = vt::ops::randn({classes, dim}, gen) * 2.0;
    Tensor y = vt::ops::randint(0, classes, {n}, gen);
    Tensor x = vt::ops::index_select(centres, 0, y) + vt::ops::randn({n, dim}, gen) * 0.5;

    Classifier model(dim, 32, classes, gen);
    std::printf("%s", model.summary().c_str());

    // AdamW with no weight decay on biases and norms; lr warms up, then decays by a cosine.
    auto groups = nn::optim::param_groups_with_decay(model, /*lr=*/1e-2, /*weight_decay=*/0.05);
    nn::optim::AdamW opt(groups);
    const int64_t steps = 150;
    nn::optim::WarmupCosineSchedule schedule(/*warmup_steps=*/10, steps);
    nn::CrossEntropyLoss criterion(/*label_smoothing=*/0.0);

    model.train();
    double loss_value = 0;
    for (int64_t step = 0; step < steps; ++step) {
      schedule.apply(opt, step);
      opt.zero_grad();
      Tensor loss = criterion.forward(model.forward(x), y);
      loss.backward();
      nn::optim::clip_grad_norm_(model.parameters(), 1.0);
      opt.step();
      loss_value = loss.item();
      if (step % 50 == 0 || step == steps - 1)
        std::printf("step %3ld  loss %.4f\n", static_cast<long>(step), loss_value);
    }

    // Save (weights + optimizer state + what a user needs to rebuild the model), load, compare.
    model.eval();
    nn::Metadata meta;
    meta["vitrine.config"] = R"({"in": 8, "hidden": 32, "classes": 4})";
    nn::save_checkpoint("classifier.safetensors", model, meta, &opt);
    vt::Generator other(123);
    Classifier restored(dim, 32, classes, other);
    restored.eval();
    nn::load_checkpoint("classifier.safetensors", restored);
    vt::NoGradGuard no_grad;
    Tensor a = model.forward(x), b = restored.forward(x);
    double diff = vt::ops::max(vt::ops::abs(a - b)).item();
    double accuracy = vt::ops::mean(vt::ops::eq(vt::ops::argmax(a, 1), y).to(vt::kFloat32)).item();
    std::printf("accuracy %.3f, max difference after reload %g\n", accuracy, diff);
    return loss_value < 0.1 && accuracy > 0.95 && diff == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
