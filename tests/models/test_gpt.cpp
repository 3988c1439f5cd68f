// models::GPT against a PyTorch re-implementation of Hugging Face's GPT2LMHeadModel
// (tests/fixtures/make_gpt_fixtures.py): a random-weight checkpoint in Hugging Face's names and
// layout, converted by tools/convert/convert.py; logits, loss and every gradient at T = 13; the
// reference's generated tokens under greedy, top-k and top-p sampling with its random draws
// replayed; the key/value cache against the whole-context forward; weight tying, GPT-2's init,
// the config and its errors.
#include <cmath>
#include <filesystem>

#include "test_util.h"

using namespace vt_test;
using models::GPT;
using models::GPTConfig;

namespace {

Tensor int_tensor(const nlohmann::json& rows) {
  std::vector<int64_t> v;
  for (const auto& row : rows)
    for (const auto& x : row) v.push_back(x.get<int64_t>());
  return ops::from_vector(
      v, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

/// max |a - b| / max(max |b|, tiny): one relative error per tensor.
double rel_err(const Tensor& a, const Tensor& b) {
  const double scale = std::max(ops::max(b.abs()).item(), 1e-30);
  return ops::max((a.to(kFloat64) - b.to(kFloat64)).abs()).item() / scale;
}

GPTConfig tiny_config() {
  GPTConfig c;
  c.vocab_size = 37, c.block_size = 24, c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  return c;
}

}  // namespace

TEST_CASE("GPT: logits, loss and every gradient equal Hugging Face's GPT-2 (PyTorch) at T = 13") {
  const auto& fx = fixture_json("gpt.json");
  auto model = models::load_gpt(fixture("gpt_tiny.safetensors"));
  CHECK(model->config.n_head == 3);
  CHECK(model->config.vocab_size == 101);
  const nn::SafetensorsFile expected =
      nn::read_safetensors(fixture("gpt_tiny_expected.safetensors"));
  auto find = [&](const std::string& name) {
    for (const auto& [n, t] : expected.tensors)
      if (n == name) return t;
    FAIL("no tensor ", name, " in the fixture");
    return Tensor();
  };
  const Tensor tokens = int_tensor(fx["tokens"]), targets = int_tensor(fx["targets"]);
  Tensor logits;
  const Tensor loss = model->loss(tokens, targets, &logits);
  CHECK(rel_err(logits, find("logits")) < 1e-5);
  CHECK(loss.item() == doctest::Approx(fx["loss"].get<double>()).epsilon(1e-5));
  loss.backward();
  int checked = 0;
  for (const auto& named : model->named_parameters()) {
    const std::string& name = named.first;
    const Tensor& p = named.second;
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(rel_err(p.grad(), find("grad." + name)) < 1e-5);
    ++checked;
  }
  // 2 embeddings, 12 per block, ln_f's 2; the tied head is the embedding (listed once).
  CHECK(checked == 2 + 12 * 2 + 2);
}

TEST_CASE(
    "GPT: generation replays the reference's tokens (greedy, top-k, top-p, past block_size)") {
  const auto& fx = fixture_json("gpt.json");
  auto model = models::load_gpt(fixture("gpt_tiny.safetensors"));
  for (const auto& c : fx["generate"]) {
    const std::string name = c["name"].get<std::string>();
    for (bool cache : {true, false}) {
      INFO(name, cache ? " with the cache" : " without the cache");
      std::vector<double> u = c["u"].get<std::vector<double>>();
      size_t next = 0;
      models::GenerateOptions o;
      o.max_new_tokens = c["max_new_tokens"].get<int64_t>();
      o.temperature = c["temperature"].get<double>();
      o.top_k = c["top_k"].get<int64_t>();
      o.top_p = c["top_p"].get<double>();
      o.use_cache = cache;
      o.uniform = [&] { return next < u.size() ? u[next++] : 0.5; };
      const Tensor out = model->generate(int_tensor(c["prompt"]), o);
      CHECK(out.to_vector<int64_t>() == int_tensor(c["tokens"]).to_vector<int64_t>());
      if (o.temperature > 0) CHECK(next == u.size());
    }
  }
  CHECK(model->is_training());  // generate restores the mode
}

TEST_CASE("GPT: the key/value cache gives the whole-context forward's logits, chunk by chunk") {
  Generator gen(3);
  GPT model(tiny_config(), gen);
  model.eval();
  NoGradGuard no_grad;
  const Tensor idx = ops::randint(0, 37, {2, 20}, gen);
  const Tensor full = model(idx);  // [2, 20, 37]
  models::KVCache cache;
  int64_t at = 0;
  for (int64_t chunk : {5, 1, 4, 1, 1, 8}) {
    const Tensor part = model.forward(idx.narrow(1, at, chunk), &cache);
    CHECK(cache.length == at + chunk);
    CHECK(rel_err(part, full.narrow(1, at, chunk)) < 1e-5);
    at += chunk;
  }
  CHECK_THROWS_WITH_AS(model.forward(idx.narrow(1, 0, 5), &cache),
                       doctest::Contains("5 tokens after 20 cached do not fit the context of "
                                         "block_size 24"),
                       Error);
  // The same seed gives the same tokens; the cache changes nothing.
  models::GenerateOptions o;
  o.max_new_tokens = 6, o.temperature = 0.9, o.top_k = 8, o.seed = 11;
  const Tensor a = model.generate(idx.narrow(1, 0, 3), o);
  o.use_cache = false;
  const Tensor b = model.generate(idx.narrow(1, 0, 3), o);
  CHECK(a.to_vector<int64_t>() == b.to_vector<int64_t>());
  CHECK(a.shape() == Dims{2, 9});
}

TEST_CASE("GPT: the head is tied to the token embedding, through state_dict and the optimizer") {
  Generator gen(1);
  GPT model(tiny_config(), gen);
  CHECK(model.lm_head->weight.same(model.wte->weight));
  int64_t listed = 0;
  for (const auto& [name, p] : model.named_parameters()) listed += p.same(model.wte->weight);
  CHECK(listed == 1);
  int64_t named = 0;
  for (const auto& [name, t] : model.state_dict())
    named +=
        (name == "lm_head.weight" || name == "transformer.wte.weight") && t.same(model.wte->weight);
  CHECK(named == 2);
  // The optimizer updates the one tensor once, with both uses' gradients.
  nn::optim::SGD opt(model.parameters(), {.lr = 0.1});
  const Tensor idx = ops::randint(0, 37, {2, 6}, gen);
  const Tensor before = model.wte->weight.detach().clone();
  model.loss(idx, idx).backward();
  const Tensor grad = model.wte->weight.grad().clone();
  opt.step();
  CHECK(rel_err(model.lm_head->weight, before - grad * 0.1) < 1e-6);
  // A saved model loads back with the tie intact.
  const std::string path =
      (std::filesystem::temp_directory_path() / "vitrine_test_gpt_roundtrip.safetensors").string();
  models::save_gpt(path, model);
  auto loaded = models::load_gpt(path);
  std::filesystem::remove(path);
  CHECK(loaded->lm_head->weight.same(loaded->wte->weight));
  const nn::NamedTensors saved = model.state_dict(), back = loaded->state_dict();
  REQUIRE(saved.size() == back.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    INFO(saved[i].first);
    CHECK(back[i].first == saved[i].first);
    CHECK(ops::max((back[i].second - saved[i].second).abs()).item() == 0);
  }
  NoGradGuard no_grad;
  model.eval(), loaded->eval();
  CHECK(rel_err((*loaded)(idx), model(idx)) == 0);
  // tie_weights checks the shapes.
  nn::Linear head(16, 36, false, gen);
  CHECK_THROWS_WITH_AS(nn::tie_weights(head, *model.wte),
                       doctest::Contains("tie_weights: the head's weight [36, 16] and the "
                                         "embedding's [37, 16] differ in shape"),
                       Error);
}

TEST_CASE("GPT: GPT-2's init (N(0, 0.02), scaled c_proj, zero biases, unit LayerNorms)") {
  GPTConfig c = GPTConfig::preset("gpt-nano");  // 3 layers, 48 wide, GPT-2's vocabulary
  Generator gen(0);
  GPT model(c, gen);
  auto std_of = [](const Tensor& t) {
    const Tensor x = t.detach().to(kFloat64);
    return (x - x.mean()).pow(2).mean().sqrt().item();
  };
  CHECK(std_of(model.wte->weight) == doctest::Approx(0.02).epsilon(0.01));
  CHECK(std_of(model.wpe->weight) == doctest::Approx(0.02).epsilon(0.05));
  const auto& block = *model.h->at<models::GPTBlock>(1);
  CHECK(std_of(block.attn->c_attn->weight) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(std_of(block.mlp->c_fc->weight) == doctest::Approx(0.02).epsilon(0.05));
  const double scaled = 0.02 / std::sqrt(2.0 * 3);
  CHECK(std_of(block.attn->c_proj->weight) == doctest::Approx(scaled).epsilon(0.05));
  CHECK(std_of(block.mlp->c_proj->weight) == doctest::Approx(scaled).epsilon(0.05));
  CHECK(ops::max(block.attn->c_attn->bias.abs()).item() == 0);
  CHECK(ops::min(block.ln_1->weight).item() == 1);
  // The first loss is near ln(vocab): the tied head starts near 0.
  const Tensor idx = ops::randint(0, c.vocab_size, {2, 8}, gen);
  const Tensor targets = ops::randint(0, c.vocab_size, {2, 8}, gen);
  CHECK(model.loss(idx, targets).item() == doctest::Approx(std::log(50257.0)).epsilon(0.01));
}

TEST_CASE("GPT: configs, presets and their errors") {
  CHECK(GPTConfig::preset("gpt2").n_embd == 768);
  CHECK(GPTConfig::preset("gpt2-medium").n_layer == 24);
  CHECK(GPTConfig::preset("gpt2-xl").n_head == 25);
  CHECK_THROWS_WITH_AS(GPTConfig::preset("gpt3"),
                       doctest::Contains("no preset 'gpt3' (the presets: gpt2, gpt2-medium"),
                       Error);
  const GPTConfig c = GPTConfig::from_json({{"preset", "gpt-micro"}, {"vocab_size", 65}});
  CHECK(c.n_layer == 4);
  CHECK(c.vocab_size == 65);
  CHECK(GPTConfig::from_json(c.to_json()).to_json() == c.to_json());
  CHECK_THROWS_WITH_AS(GPTConfig::from_json({{"n_heads", 4}}),
                       doctest::Contains("unknown key \"n_heads\""), Error);
  CHECK_THROWS_WITH_AS(GPTConfig::from_json({{"n_embd", 50}, {"n_head", 4}}),
                       doctest::Contains("n_embd 50 is not a multiple of n_head 4"), Error);
  CHECK_THROWS_WITH_AS(GPTConfig::from_json({{"n_layer", 2.5}}),
                       doctest::Contains("\"n_layer\" must be an integer, got 2.5"), Error);
  Generator gen(0);
  GPT model(tiny_config(), gen);
  CHECK_THROWS_WITH_AS(model(ops::zeros({2, 3})),
                       doctest::Contains("GPT: expected idx [B, T] int64, got [2, 3] (float32)"),
                       Error);
  CHECK_THROWS_WITH_AS(model(ops::zeros({1, 25}, kInt64)),
                       doctest::Contains("25 tokens do not fit the context of block_size 24"),
                       Error);
  models::GenerateOptions o;
  o.top_p = 0;
  CHECK_THROWS_WITH_AS(model.generate(ops::zeros({1, 2}, kInt64), o),
                       doctest::Contains("top_p must be in (0, 1], got 0"), Error);
  CHECK_THROWS_WITH_AS(models::load_gpt(fixture("foreign.safetensors")),
                       doctest::Contains("foreign.safetensors: not a GPT checkpoint"), Error);
}
