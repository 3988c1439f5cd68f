// The ResNet of models/resnet.h trained on Fashion-MNIST through the library, without the
// vitrine-train program: typed options (train::TrainConfig) filled in C++, the data set opened by
// name, the Trainer's loop (schedule, checkpoints, metrics.jsonl, the test set at the end).
// docs/nn.md walks through it; the test suite runs it for 60 steps (ctest -R examples/).
// Usage: resnet_train FASHION_MNIST_DIR [STEPS]
#include <vitrine.h>

#include <cstdio>
#include <string>

#include "train/datasets.h"
#include "train/trainer.h"

using namespace vitrine;

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "usage: resnet_train FASHION_MNIST_DIR [STEPS]\n"), 2;
  try {
    // The model: ResNet-8 (three stages of one basic block, 16/32/64 channels) for 1x28x28.
    models::ResNetConfig arch = models::ResNetConfig::preset("resnet8");
    arch.channels = 1;
    arch.image_h = arch.image_w = 28;

    // The run's options, as vitrine-train's config sections would give them.
    train::TrainConfig cfg;
    cfg.model = models::ClassifierSpec::of(arch);
    cfg.data.dataset = {.name = "fashion-mnist", .path = argv[1]};
    cfg.data.validation_fraction = 0;  // train on all 60000; the test set is measured at the end
    cfg.data.batch_size = 128;
    cfg.data.transforms = {{"mean", {0.286}}, {"std", {0.353}}};
    cfg.optim = {.name = "adamw", .lr = 2e-3, .weight_decay = 0.05};
    cfg.schedule = {.name = "warmup_cosine", .warmup_epochs = 0.05};
    cfg.train.epochs = 1;
    cfg.train.max_steps = argc > 2 ? std::stoll(argv[2]) : 0;  // 0: the whole epoch
    cfg.train.log_every = 10;
    cfg.train.out = "runs/resnet_example";

    train::Datasets data = train::load_datasets(cfg.data, cfg.train.seed);
    train::Trainer trainer(cfg, data.train, data.validation, data.test, cfg.train.out);
    std::printf("%s: %ld parameters, %ld steps per epoch\n", cfg.model.describe().c_str(),
                static_cast<long>(trainer.model().num_parameters()),
                static_cast<long>(trainer.steps_per_epoch()));
    trainer.set_on_step([](const train::StepInfo& s) {
      if (s.global_step % 10 == 0)
        std::printf("step %4ld  loss %.4f  %.0f images/s\n", static_cast<long>(s.global_step),
                    s.loss, static_cast<double>(s.examples) / s.step_seconds);
    });
    const train::TrainResult r = trainer.run();
    std::printf("%s\ntest accuracy %.4f on %ld images; weights in %s/last.safetensors\n",
                r.message.c_str(), r.test->accuracy, static_cast<long>(r.test->count),
                cfg.train.out.c_str());
    return r.test->accuracy > 0.5 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
