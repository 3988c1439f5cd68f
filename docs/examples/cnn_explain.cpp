// A small CNN built, trained and explained with an installed Vitrine (find_package(vitrine), then
// vitrine::vitrine and vitrine::explain): Conv2d, BatchNorm2d, MaxPool2d, AdaptiveAvgPool2d,
// Flatten, Fashion-MNIST through the library's data, AdamW, then saliency, integrated gradients
// and Grad-CAM on one test image. docs/nn.md walks through it; the install test builds it against
// an installed prefix and runs it (ctest -R install). Usage: cnn_explain FASHION_MNIST_DIR
#include <vitrine.h>

#include <cstdio>

#include "explain/explain.h"

using namespace vitrine;

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: cnn_explain FASHION_MNIST_DIR\n"), 2;
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 16, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(16),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(32),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::AdaptiveAvgPool2d>(1),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(32, 10)});
  auto train = nn::data::fashion_mnist(argv[1], true),
       test = nn::data::fashion_mnist(argv[1], false);
  nn::data::Compose normalize({std::make_shared<nn::data::Normalize>(std::vector<float>{0.286f},
                                                                     std::vector<float>{0.353f})});
  nn::data::DataLoader loader(train, normalize, {.batch_size = 64, .seed = 1, .workers = 0});
  nn::optim::AdamW opt(net->parameters(), {.lr = 3e-3});
  loader.start_epoch(0);
  for (int step = 0; step < 30; ++step) {
    auto batch = loader.next();
    Tensor loss = ops::cross_entropy((*net)(batch->images), batch->labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 10 == 0 || step == 29) std::printf("step %d loss %.3f\n", step, loss.item());
  }
  net->eval();
  nn::data::DataLoader first(test, normalize, {.batch_size = 1, .shuffle = false, .workers = 0});
  first.start_epoch(0);
  Tensor image = first.next()->images;  // [1, 1, 28, 28], the first test image
  explain::Options o;
  auto maps = explain::explain(*net, (*net)[6].get(), image, {-1},
                               explain::parse_methods("saliency,integrated-gradients,gradcam"), o);
  for (const auto& e : maps)
    std::printf("%s: map %ldx%ld, max at %ld\n", explain::method_name(e.method).c_str(),
                e.map.size(1), e.map.size(2), ops::argmax(e.map.reshape({-1}), 0).item<int64_t>());
  return maps.size() == 3 ? 0 : 1;
}
