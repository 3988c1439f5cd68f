// A complete Vitrine program: define a model from nn modules, read Fashion-MNIST through the
// library's data sets, train it with AdamW and a warm-up + cosine schedule, measure it on the
// test set, save a checkpoint, load it into a fresh model and check it computes the same.
// docs/nn.md walks through it; the test suite builds and runs it (ctest -R examples/).
// Usage: mlp_classifier [STEPS [FASHION_MNIST_DIR]]   (default 300 steps, the Debian package's
// folder)
#include <vitrine.h>

#include <cstdio>
#include <string>

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
  // images [B, 1, 28, 28] -> logits [B, classes]
  Tensor forward(const Tensor& x) override {
    return head->forward(norm->forward(body->forward(x.flatten(1))));
  }
  std::string type_name() const override { return "Classifier"; }

  std::shared_ptr<nn::MLP> body;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> head;
};

int main(int argc, char** argv) {
  try {
    const int64_t steps = argc > 1 ? std::stoll(argv[1]) : 300;
    // Data: a data set by name (its folder: argv[2], or "" for the Debian package's), normalised
    // with the training images' mean and std, in shuffled batches of 128.
    nn::data::DatasetOptions source{.name = "fashion-mnist", .path = argc > 2 ? argv[2] : ""};
    nn::data::DatasetFiles files = nn::data::open_dataset(source);
    auto transforms = nn::data::from_config({{"mean", {0.286}}, {"std", {0.353}}}, 1, false);
    nn::data::DataLoader train(files.train, transforms, {.batch_size = 128, .seed = 0});

    vt::Generator gen(0);
    Classifier model(28 * 28, 256, 10, gen);
    std::printf("%s", model.summary().c_str());

    // AdamW with no weight decay on biases and norms; lr warms up, then decays by a cosine.
    auto groups = nn::optim::param_groups_with_decay(model, /*lr=*/2e-3, /*weight_decay=*/0.05);
    nn::optim::AdamW opt(groups);
    nn::optim::WarmupCosineSchedule schedule(/*warmup_steps=*/steps / 10, steps);
    nn::CrossEntropyLoss criterion(/*label_smoothing=*/0.0);

    model.train();
    int64_t epoch = 0;
    train.start_epoch(epoch);
    for (int64_t step = 0; step < steps; ++step) {
      auto batch = train.next();
      if (!batch) {  // the epoch ran out: the next one, reshuffled
        train.start_epoch(++epoch);
        batch = train.next();
      }
      schedule.apply(opt, step);
      opt.zero_grad();
      Tensor loss = criterion.forward(model.forward(batch->images), batch->labels);
      loss.backward();
      nn::optim::clip_grad_norm_(model.parameters(), 1.0);
      opt.step();
      if (step % 100 == 0 || step == steps - 1)
        std::printf("step %3ld  loss %.4f\n", static_cast<long>(step), loss.item());
    }

    // The test set, in eval mode without gradients. Each batch runs in chunks side by side on
    // the CPU's threads, a chunk's activations (at most the 784 pixels of an image) within one
    // core's cache (nn/chunks.h): the MLP treats its images one by one, and records nothing.
    model.eval();
    vt::NoGradGuard no_grad;
    nn::data::DataLoader test(files.test, transforms, {.batch_size = 500, .shuffle = false});
    test.start_epoch(0);
    int64_t correct = 0, seen = 0;
    Tensor first_batch;
    const auto forward = [&](const Tensor& x) { return model.forward(x); };
    while (auto batch = test.next()) {
      if (!first_batch.defined()) first_batch = batch->images;
      const int64_t chunks = nn::inference_chunks(batch->images.size(0), 28 * 28 * sizeof(float));
      Tensor logits = nn::forward_in_chunks(batch->images, chunks, forward);
      Tensor predicted = vt::ops::argmax(logits, 1);
      correct += vt::ops::sum(vt::ops::eq(predicted, batch->labels).to(vt::kInt64)).item<int64_t>();
      seen += batch->labels.numel();
    }
    const double accuracy = static_cast<double>(correct) / static_cast<double>(seen);

    // Save (weights + optimizer state + what a user needs to rebuild the model), load, compare.
    nn::Metadata meta;
    meta["vitrine.config"] = R"({"in": 784, "hidden": 256, "classes": 10})";
    nn::save_checkpoint("classifier.safetensors", model, meta, &opt);
    vt::Generator other(123);
    Classifier restored(28 * 28, 256, 10, other);
    restored.eval();
    nn::load_checkpoint("classifier.safetensors", restored);
    Tensor a = model.forward(first_batch), b = restored.forward(first_batch);
    const double diff = vt::ops::max(vt::ops::abs(a - b)).item();
    std::printf("test accuracy %.4f (%ld images), max difference after reload %g\n", accuracy,
                static_cast<long>(seen), diff);
    return accuracy > 0.7 && diff == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
