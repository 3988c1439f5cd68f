// Training end to end with the nn layer: an MLP learns a synthetic classification task, and
// freezing everything but the head leaves the frozen weights bit-identical.
#include "nn/nn.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;

namespace {
struct Blobs {
  Tensor x, y;
};
/// 3 classes, Gaussian blobs in 6-D (std 0.6 around centres of norm ~2.5).
Blobs make_blobs(int64_t n, Generator& g) {
  Tensor centres = ops::randn({3, 6}, g);
  Tensor y = ops::randint(0, 3, {n}, g);
  Tensor x = ops::index_select(centres, 0, y) + ops::randn({n, 6}, g) * 0.6;
  return {x, y};
}

std::shared_ptr<nn::Sequential> make_mlp(Generator& g) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 32, true, g), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Linear>(32, 32, true, g), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Linear>(32, 3, true, g)});
}

double train(nn::Module& model, nn::optim::Optimizer& opt, const Blobs& d, int steps) {
  double last = 0;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = ops::cross_entropy(model.forward(d.x), d.y);
    loss.backward();
    opt.step();
    last = loss.item();
  }
  return last;
}
}  // namespace

TEST_CASE(
    "training: an MLP learns a synthetic classification task (loss < 0.05 in 200 AdamW steps)") {
  Generator g(0);
  Blobs d = make_blobs(300, g);
  auto mlp = make_mlp(g);
  nn::optim::AdamW opt(mlp->parameters(), {.lr = 1e-2, .weight_decay = 1e-2});
  double first = ops::cross_entropy(mlp->forward(d.x), d.y).item();
  double last = train(*mlp, opt, d, 200);
  MESSAGE("loss " << first << " -> " << last);
  CHECK(first > 0.5);
  CHECK(last < 0.05);
  Tensor pred = ops::argmax(mlp->forward(d.x), 1);
  CHECK(ops::mean(ops::eq(pred, d.y).to(kFloat32)).item() > 0.98);
}

TEST_CASE("training: freezing all but the head keeps frozen weights bit-identical") {
  Generator g(1);
  Blobs d = make_blobs(200, g);
  auto mlp = make_mlp(g);
  auto head = std::dynamic_pointer_cast<nn::Linear>((*mlp)[4]);
  mlp->requires_grad_(false);
  head->requires_grad_(true);
  std::vector<std::vector<float>> before;
  for (auto& [n, p] : mlp->named_parameters()) before.push_back(p.to_vector<float>());
  std::vector<float> head_before = head->weight.to_vector<float>();

  // All parameters handed to the optimizer (as a careless user would): frozen ones get no
  // gradient and must not move, not even through weight decay.
  nn::optim::AdamW opt(mlp->parameters(), {.lr = 3e-2, .weight_decay = 0.1});
  double first = ops::cross_entropy(mlp->forward(d.x), d.y).item();
  double last = train(*mlp, opt, d, 200);
  MESSAGE("head-only training: loss " << first << " -> " << last);
  CHECK(last < 0.6 * first);  // the head alone learns on frozen random features
  auto params = mlp->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    bool frozen = params[i].first.rfind("4.", 0) != 0;
    CHECK((params[i].second.to_vector<float>() == before[i]) == frozen);
  }
  CHECK(head->weight.to_vector<float>() != head_before);
  // The recommended way: only trainable parameters go to the optimizer.
  auto groups = nn::optim::param_groups_with_decay(*mlp, 1e-2, 0.05);
  size_t n = 0;
  for (auto& gr : groups) n += gr.params.size();
  CHECK(n == 2);  // head.weight (decay) and head.bias (no decay)
}
