// GPT-2 (gpt.h): the modules, the cache-aware forward, the loss, sampling and generation.
#include "models/gpt.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "autograd/grad_mode.h"
#include "nn/init.h"
#include "nn/state.h"
#include "ops/ops.h"
#include "ops/sequence.h"

namespace vitrine::models {

// ---- config -----------------------------------------------------------------------------------

namespace {
struct Preset {
  const char* name;
  int64_t n_layer, n_head, n_embd;
};
constexpr Preset kPresets[] = {
    {"gpt2", 12, 12, 768},     {"gpt2-medium", 24, 16, 1024}, {"gpt2-large", 36, 20, 1280},
    {"gpt2-xl", 48, 25, 1600}, {"gpt-mini", 6, 6, 192},       {"gpt-micro", 4, 4, 128},
    {"gpt-nano", 3, 3, 48},
};
}  // namespace

GPTConfig GPTConfig::preset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) {
      GPTConfig c;
      c.n_layer = p.n_layer, c.n_head = p.n_head, c.n_embd = p.n_embd;
      return c;
    }
  fail("GPTConfig: no preset '{}' (the presets: {})", name, fmt::join(preset_names(), ", "));
}

std::vector<std::string> GPTConfig::preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

nlohmann::json GPTConfig::to_json() const {
  return {{"vocab_size", vocab_size},
          {"block_size", block_size},
          {"n_layer", n_layer},
          {"n_head", n_head},
          {"n_embd", n_embd},
          {"dropout", dropout},
          {"layer_norm_eps", layer_norm_eps}};
}

GPTConfig GPTConfig::from_json(const nlohmann::json& j) {
  VT_CHECK(j.is_object(), "GPTConfig: expected a JSON object, got {}", j.dump());
  GPTConfig c;
  if (j.contains("preset")) {
    VT_CHECK(j["preset"].is_string(), "GPTConfig: \"preset\" must be a string, got {}",
             j["preset"].dump());
    c = preset(j["preset"].get<std::string>());
  }
  for (const auto& item : j.items()) {
    // Named copies, not structured bindings: clang 14 cannot capture those in the lambdas.
    const std::string key = item.key();
    const nlohmann::json& value = item.value();
    auto integer = [&](int64_t& field) {
      VT_CHECK(value.is_number_integer(), "GPTConfig: \"{}\" must be an integer, got {}", key,
               value.dump());
      field = value.get<int64_t>();
    };
    auto number = [&](double& field) {
      VT_CHECK(value.is_number(), "GPTConfig: \"{}\" must be a number, got {}", key, value.dump());
      field = value.get<double>();
    };
    if (key == "preset") continue;
    if (key == "vocab_size")
      integer(c.vocab_size);
    else if (key == "block_size")
      integer(c.block_size);
    else if (key == "n_layer")
      integer(c.n_layer);
    else if (key == "n_head")
      integer(c.n_head);
    else if (key == "n_embd")
      integer(c.n_embd);
    else if (key == "dropout")
      number(c.dropout);
    else if (key == "layer_norm_eps")
      number(c.layer_norm_eps);
    else
      fail(
          "GPTConfig: unknown key \"{}\" (expected preset, vocab_size, block_size, n_layer, "
          "n_head, n_embd, dropout, layer_norm_eps)",
          key);
  }
  c.validate();
  return c;
}

void GPTConfig::validate() const {
  VT_CHECK(vocab_size > 0 && block_size > 0 && n_layer > 0 && n_head > 0 && n_embd > 0,
           "GPTConfig: vocab_size, block_size, n_layer, n_head and n_embd must be positive, got "
           "{}, {}, {}, {}, {}",
           vocab_size, block_size, n_layer, n_head, n_embd);
  VT_CHECK(n_embd % n_head == 0, "GPTConfig: n_embd {} is not a multiple of n_head {}", n_embd,
           n_head);
  VT_CHECK(dropout >= 0 && dropout < 1, "GPTConfig: dropout must be in [0, 1), got {}", dropout);
  VT_CHECK(layer_norm_eps > 0, "GPTConfig: layer_norm_eps must be positive, got {}",
           layer_norm_eps);
}

// ---- attention --------------------------------------------------------------------------------

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c, Generator& g)
    : n_head(c.n_head), attn_dropout(c.dropout), gen(&g) {
  c_attn = register_module("c_attn", std::make_shared<nn::Linear>(c.n_embd, 3 * c.n_embd, true, g));
  c_proj = register_module("c_proj", std::make_shared<nn::Linear>(c.n_embd, c.n_embd, true, g));
  resid_dropout = register_module("resid_dropout", std::make_shared<nn::Dropout>(c.dropout, g));
}

Tensor CausalSelfAttention::forward(const Tensor& x, const Tensor& residual, KVCache* cache,
                                    int64_t layer) {
  VT_CHECK(x.dim() == 3 && x.size(2) == c_attn->in_features,
           "CausalSelfAttention: expected x [B, T, {}], got {}", c_attn->in_features, x.shape());
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head, E = C / H;
  // q, k, v [B, H, T, E]: views of c_attn's output [B, T, 3, H, E], read in place.
  const Tensor parts = (*c_attn)(x).reshape({B, T, 3, H, E}).permute({2, 0, 3, 1, 4});
  const Tensor q = parts.select(0, 0), k = parts.select(0, 1), v = parts.select(0, 2);
  const double p = is_training() ? attn_dropout : 0.0;
  Tensor y;  // [B, H, T, E]
  if (cache == nullptr) {
    y = ops::scaled_dot_product_attention(q, k, v, Tensor(), p, /*is_causal=*/true, std::nullopt,
                                          *gen);
  } else {
    // The new positions [L, L + T) go into the cache; the queries attend to [0, L + T).
    const int64_t L = cache->length, S = L + T;
    auto& ck = cache->k[static_cast<size_t>(layer)];
    auto& cv = cache->v[static_cast<size_t>(layer)];
    VT_CHECK(S <= ck.size(2), "CausalSelfAttention: the cache holds {} positions, {} asked for",
             ck.size(2), S);
    {
      NoGradGuard no_grad;
      ck.narrow(2, L, T).copy_(k);
      cv.narrow(2, L, T).copy_(v);
    }
    const Tensor keys = ck.narrow(2, 0, S), values = cv.narrow(2, 0, S);
    if (L == 0) {
      y = ops::scaled_dot_product_attention(q, keys, values, Tensor(), p, true, std::nullopt, *gen);
    } else if (T == 1) {
      y = ops::scaled_dot_product_attention(q, keys, values, Tensor(), p, false, std::nullopt,
                                            *gen);
    } else {
      // Query i (position L + i) sees keys j <= L + i: an additive mask [T, S], -inf above
      // diagonal L.
      const Tensor mask = ops::triu(
          ops::full({T, S}, -std::numeric_limits<double>::infinity(), x.dtype(), x.device()),
          L + 1);
      y = ops::scaled_dot_product_attention(q, keys, values, mask, p, false, std::nullopt, *gen);
    }
  }
  y = y.transpose(1, 2).reshape({B, T, C});
  // c_proj with the residual added as it writes, unless dropout or a hook must see its output.
  if (residual.defined() && !resid_dropout->active() && !c_proj->has_forward_hooks() &&
      !resid_dropout->has_forward_hooks())
    return ops::linear(y, c_proj->weight, c_proj->bias, residual);
  Tensor out = (*resid_dropout)((*c_proj)(y));
  return residual.defined() ? residual + out : out;
}

// ---- MLP and block ----------------------------------------------------------------------------

GPTMLP::GPTMLP(const GPTConfig& c, Generator& g) {
  c_fc = register_module("c_fc", std::make_shared<nn::Linear>(c.n_embd, 4 * c.n_embd, true, g));
  act = register_module("act", std::make_shared<nn::GELU>(/*tanh_approx=*/true));
  c_proj = register_module("c_proj", std::make_shared<nn::Linear>(4 * c.n_embd, c.n_embd, true, g));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout, g));
}

Tensor GPTMLP::forward(const Tensor& x, const Tensor& residual) {
  if (!dropout->active() && !has_forward_hooks_below())
    return ops::mlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias,
                    act->tanh_approx ? Activation::GELUTanh : Activation::GELU, residual);
  Tensor out = (*dropout)((*c_proj)((*act)((*c_fc)(x))));
  return residual.defined() ? residual + out : out;
}

GPTBlock::GPTBlock(const GPTConfig& c, Generator& g) {
  ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_eps));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c, g));
  ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_eps));
  mlp = register_module("mlp", std::make_shared<GPTMLP>(c, g));
}

Tensor GPTBlock::forward(const Tensor& x, KVCache* cache, int64_t layer) {
  const Tensor h = attn->forward((*ln_1)(x), x, cache, layer);
  return mlp->forward((*ln_2)(h), h);
}

// ---- the model --------------------------------------------------------------------------------

GPT::GPT(const GPTConfig& c, Generator& g) : config(c) {
  config.validate();
  transformer = register_module("transformer", std::make_shared<nn::Module>());
  wte = transformer->register_module("wte",
                                     std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd, g));
  wpe = transformer->register_module("wpe",
                                     std::make_shared<nn::Embedding>(c.block_size, c.n_embd, g));
  drop = transformer->register_module("drop", std::make_shared<nn::Dropout>(c.dropout, g));
  h = transformer->register_module("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<GPTBlock>(c, g));
  ln_f = transformer->register_module("ln_f",
                                      std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_eps));
  lm_head =
      register_module("lm_head", std::make_shared<nn::Linear>(c.n_embd, c.vocab_size, false, g));
  nn::tie_weights(*lm_head, *wte);
  nn::init::gpt2_(*this, c.n_layer, g);
}

std::string GPT::extra_repr() const {
  return fmt::format("vocab_size={}, block_size={}, n_layer={}, n_head={}, n_embd={}",
                     config.vocab_size, config.block_size, config.n_layer, config.n_head,
                     config.n_embd);
}

Tensor GPT::forward(const Tensor& idx, KVCache* cache) {
  return (*lm_head)(hidden(idx, cache));  // [B, T, vocab_size]
}

Tensor GPT::hidden(const Tensor& idx, KVCache* cache) {
  VT_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, "GPT: expected idx [B, T] int64, got {} ({})",
           idx.shape(), dtype_name(idx.dtype()));
  const int64_t B = idx.size(0), T = idx.size(1);
  const int64_t start = cache ? cache->length : 0;
  VT_CHECK(T > 0 && start + T <= config.block_size,
           "GPT: {} tokens{} do not fit the context of block_size {}", T,
           cache ? fmt::format(" after {} cached", start) : std::string(), config.block_size);
  if (cache != nullptr && cache->k.empty()) {
    const int64_t H = config.n_head, E = config.n_embd / H;
    for (int64_t l = 0; l < config.n_layer; ++l) {
      cache->k.push_back(
          ops::zeros({B, H, config.block_size, E}, wte->weight.dtype(), wte->weight.device()));
      cache->v.push_back(
          ops::zeros({B, H, config.block_size, E}, wte->weight.dtype(), wte->weight.device()));
    }
  }
  if (cache != nullptr)
    VT_CHECK(cache->k.size() == static_cast<size_t>(config.n_layer) && cache->k[0].size(0) == B,
             "GPT: the cache was made for batch {} and {} layers, not batch {} and {}",
             cache->k.empty() ? 0 : cache->k[0].size(0), cache->k.size(), B, config.n_layer);
  const Tensor pos =
      ops::arange(static_cast<double>(start), static_cast<double>(start + T), 1.0, kInt64)
          .to(idx.device());
  Tensor x = (*drop)((*wte)(idx) + (*wpe)(pos));  // [B, T, C] + [T, C]
  for (size_t l = 0; l < h->size(); ++l)
    x = h->at<GPTBlock>(l)->forward(x, cache, static_cast<int64_t>(l));
  if (cache != nullptr) cache->length += T;
  return (*ln_f)(x);
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets, Tensor* logits_out) {
  VT_CHECK(targets.shape() == idx.shape(), "GPT::loss: targets {} must have idx's shape {}",
           targets.shape(), idx.shape());
  const Tensor logits = forward(idx);
  if (logits_out) *logits_out = logits;
  return ops::cross_entropy(logits.reshape({-1, config.vocab_size}), targets.reshape({-1}),
                            ops::Reduction::Mean, /*label_smoothing=*/0, /*ignore_index=*/-1);
}

// ---- sampling ---------------------------------------------------------------------------------

std::vector<int64_t> sample_next_tokens(const Tensor& logits, const GenerateOptions& o,
                                        const std::vector<double>& u) {
  VT_CHECK(logits.dim() == 2, "sample_next_tokens: expected logits [B, V], got {}", logits.shape());
  VT_CHECK(o.temperature >= 0, "generate: temperature must be >= 0, got {}", o.temperature);
  VT_CHECK(o.top_k >= 0, "generate: top_k must be >= 0, got {}", o.top_k);
  VT_CHECK(o.top_p > 0 && o.top_p <= 1, "generate: top_p must be in (0, 1], got {}", o.top_p);
  const int64_t B = logits.size(0), V = logits.size(1);
  const std::vector<double> all = logits.to(kFloat64).contiguous().to_vector<double>();
  std::vector<int64_t> out(static_cast<size_t>(B));
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> z(all.begin() + b * V, all.begin() + (b + 1) * V);
    if (o.temperature == 0) {  // greedy: the first largest
      out[static_cast<size_t>(b)] = std::max_element(z.begin(), z.end()) - z.begin();
      continue;
    }
    for (double& v : z) v /= o.temperature;
    if (o.top_k > 0 && o.top_k < V) {  // keep values >= the k-th largest (ties kept)
      std::vector<double> sorted = z;
      std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(),
                       std::greater<>());
      const double kth = sorted[static_cast<size_t>(o.top_k - 1)];
      for (double& v : z)
        if (v < kth) v = -inf;
    }
    const double max = *std::max_element(z.begin(), z.end());
    std::vector<double> p(z.size());
    double sum = 0;
    for (size_t i = 0; i < z.size(); ++i) sum += (p[i] = std::exp(z[i] - max));
    for (double& v : p) v /= sum;
    if (o.top_p < 1) {
      // Hugging Face's TopPLogitsWarper: sorted ascending, drop the tokens whose cumulative
      // probability stays <= 1 - top_p, never the likeliest one.
      std::vector<int64_t> order(p.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t c) { return p[a] < p[c]; });
      double cumulative = 0;
      for (size_t r = 0; r + 1 < order.size(); ++r) {
        cumulative += p[static_cast<size_t>(order[r])];
        if (cumulative <= 1 - o.top_p) p[static_cast<size_t>(order[r])] = 0;
      }
      sum = std::accumulate(p.begin(), p.end(), 0.0);
      for (double& v : p) v /= sum;
    }
    // Inverse CDF in token order: the first token whose cumulative probability passes u.
    const double target = u.at(static_cast<size_t>(b));
    int64_t next = -1;
    double cumulative = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == 0) continue;
      next = static_cast<int64_t>(i);
      if ((cumulative += p[i]) > target) break;
    }
    out[static_cast<size_t>(b)] = next;
  }
  return out;
}

Tensor GPT::generate(const Tensor& idx, const GenerateOptions& o) {
  VT_CHECK(idx.dim() == 2 && idx.dtype() == kInt64 && idx.size(1) > 0,
           "GPT::generate: expected a prompt idx [B, T] int64 with T >= 1, got {} ({})",
           idx.shape(), dtype_name(idx.dtype()));
  VT_CHECK(o.max_new_tokens >= 0, "GPT::generate: max_new_tokens must be >= 0, got {}",
           o.max_new_tokens);
  NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  Generator gen(o.seed);
  const int64_t B = idx.size(0), limit = config.block_size;
  std::vector<int64_t> tokens = idx.contiguous().to_vector<int64_t>();  // [B, n] row-major
  int64_t n = idx.size(1);
  KVCache cache;
  std::vector<double> u(static_cast<size_t>(B));
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    Tensor logits;  // [B, V] at the last position
    auto context = [&](int64_t from, int64_t count) {
      std::vector<int64_t> c;
      for (int64_t b = 0; b < B; ++b)
        c.insert(c.end(), tokens.begin() + b * n + from, tokens.begin() + b * n + from + count);
      return ops::from_vector(c, {B, count}).to(wte->weight.device());
    };
    if (o.use_cache && n <= limit) {
      // The prompt once, then one position per token.
      const int64_t from = cache.length;
      logits = (*lm_head)(hidden(context(from, n - from), &cache).select(1, n - from - 1));
    } else {
      const int64_t count = std::min(n, limit);
      logits = (*lm_head)(hidden(context(n - count, count)).select(1, count - 1));
    }
    for (double& v : u) v = o.uniform ? o.uniform() : ops::rand({1}, gen, kFloat64).item();
    const std::vector<int64_t> next = sample_next_tokens(logits, o, u);
    std::vector<int64_t> grown;
    grown.reserve(static_cast<size_t>(B * (n + 1)));
    for (int64_t b = 0; b < B; ++b) {
      grown.insert(grown.end(), tokens.begin() + b * n, tokens.begin() + (b + 1) * n);
      grown.push_back(next[static_cast<size_t>(b)]);
    }
    tokens.swap(grown);
    ++n;
  }
  train(was_training);
  return ops::from_vector(tokens, {B, n});
}

// ---- files ------------------------------------------------------------------------------------

std::shared_ptr<GPT> load_gpt(const std::string& path) {
  const nn::Metadata meta = nn::read_safetensors_metadata(path);
  const nlohmann::json j = nn::metadata_json(meta, nn::kConfigKey);
  VT_CHECK(j.is_object(),
           "{}: no GPT config in the file (vitrine.config); convert a Hugging Face GPT-2 with "
           "tools/convert/convert.py, or save with models::save_gpt",
           path);
  const auto model = meta.find("vitrine.model");
  VT_CHECK((model == meta.end() || model->second == "gpt") &&
               (j.contains("n_embd") || j.contains("preset")),
           "{}: not a GPT checkpoint (vitrine.model {}, vitrine.config {})", path,
           model == meta.end() ? std::string("absent") : "\"" + model->second + "\"", j.dump());
  GPTConfig config;
  try {
    config = GPTConfig::from_json(j);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  const int64_t C = config.n_embd, L = config.n_layer;
  nn::check_checkpoint_holds(
      path, config.vocab_size * C + config.block_size * C + L * 12 * C * C,
      fmt::format("GPT n_layer {}, n_embd {}, vocabulary {}", L, C, config.vocab_size));
  Generator gen(0);
  auto gpt = std::make_shared<GPT>(config, gen);
  try {
    nn::load_checkpoint(path, *gpt);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  return gpt;
}

void save_gpt(const std::string& path, const GPT& model) {
  nn::Metadata meta;
  nn::set_metadata_json(meta, nn::kConfigKey, model.config.to_json());
  meta["vitrine.model"] = "gpt";
  nn::save_checkpoint(path, model, meta);
}

}  // namespace vitrine::models
