// Which parameter gradients of the default ViT and ResNet-8 depend on how the batch is split
// (issue 63): one batch of 32 against two halves of 16 averaged (as two ranks, batch norm in eval
// mode so the halves are independent), and 1 thread against 2. Prints, per parameter, "same" or
// the largest relative difference.
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "models/resnet.h"
#include "vitrine.h"

using namespace vitrine;

namespace {

std::shared_ptr<nn::Module> make(const std::string& arch) {
  Generator gen(7);
  if (arch == "resnet") {
    models::ResNetConfig c;
    c.depth = 8;
    c.channels = 1;
    return std::make_shared<models::ResNet>(c, gen);
  }
  models::ViTConfig c = models::ViTConfig::preset("fmnist");
  c.depth = 3;
  c.stem = {32, 64, 128};
  c.num_classes = 10;
  return std::make_shared<models::VisionTransformer>(c, gen);
}

std::vector<Tensor> grads(nn::Module& m, const Tensor& x, const Tensor& y, double& loss) {
  m.zero_grad();
  Tensor l = ops::cross_entropy(m(x), y, ops::Reduction::Mean, 0.1);
  loss = l.item<float>();
  l.backward();
  std::vector<Tensor> g;
  for (auto& p : m.parameters()) g.push_back(p.grad().clone());
  return g;
}

double rel(const Tensor& a, const Tensor& b) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < a.numel(); ++i) scale = std::max(scale, (double)std::abs(pa[i]));
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, std::abs((double)pa[i] - pb[i]) / (scale > 0 ? scale : 1));
  return worst;
}

void compare(const char* what, nn::Module& m, const std::vector<Tensor>& a,
             const std::vector<Tensor>& b) {
  auto names = m.named_parameters();
  int same = 0;
  std::string diffs;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(a[i].data<float>(), b[i].data<float>(), a[i].numel() * 4) == 0) {
      ++same;
      continue;
    }
    diffs += fmt::format("    {} {:.1e}\n", names[i].first, rel(a[i], b[i]));
  }
  fmt::print("  {}: {}/{} same\n{}", what, same, a.size(), diffs);
}

}  // namespace

int main(int argc, char** argv) {
  for (std::string arch : {"vit", "resnet"}) {
    if (argc > 1 && arch != argv[1]) continue;
    auto m = make(arch);
    m->train(true);
    m->apply([](nn::Module& s) {
      if (s.type_name().find("BatchNorm") != std::string::npos) s.train(false);
    });
    Generator gen(3);
    Tensor x = ops::randn({32, 1, 28, 28}, gen);
    Tensor y = ops::randint(0, 10, {32}, gen);
    fmt::print("{}\n", arch);
    {
      NoGradGuard ng;
      set_num_threads(1);
      Tensor o1 = (*m)(x);
      set_num_threads(2);
      Tensor o2 = (*m)(x);
      fmt::print(
          "  forward 1 thread vs 2: {}\n",
          std::memcmp(o1.data<float>(), o2.data<float>(), o1.numel() * 4) == 0 ? "same" : "differ");
    }
    set_num_threads(1);
    double l1, l2, lh1, lh2;
    auto g1 = grads(*m, x, y, l1);
    set_num_threads(2);
    auto g2 = grads(*m, x, y, l2);
    fmt::print("  loss 1 thread vs 2: {}\n", l1 == l2 ? "same" : "differ");
    compare("1 thread vs 2", *m, g1, g2);
    set_num_threads(1);
    auto h1 = grads(*m, ops::slice(x, 0, 0, 16), ops::slice(y, 0, 0, 16), lh1);
    auto h2 = grads(*m, ops::slice(x, 0, 16, 32), ops::slice(y, 0, 16, 32), lh2);
    std::vector<Tensor> h;
    for (size_t i = 0; i < h1.size(); ++i) h.push_back(ops::mul(ops::add(h1[i], h2[i]), 0.5));
    fmt::print("  loss whole vs halves: {}\n", l1 == (lh1 + lh2) / 2 ? "same" : "differ");
    compare("whole vs two halves", *m, g1, h);
  }
}
