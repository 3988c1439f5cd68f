// GPT: OpenAI's GPT-2 (Radford et al. 2019) in the layout of Hugging Face's GPT2LMHeadModel and
// nanoGPT's model.py, so that their checkpoints load by name (tools/convert/convert.py --gpt2
// turns Hugging Face's Conv1D weights [in, out] into Linear's [out, in]).
//
//   idx [B, T] int64 -> wte(idx) + wpe(0..T-1) -> drop -> h.0 .. h.{n_layer-1} -> ln_f -> lm_head
//   Block:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))        (pre-norm)
//   attn:   c_attn: dim -> 3 dim (q, k, v), causal attention per head, c_proj: dim -> dim
//   mlp:    c_fc: dim -> 4 dim, GELU (tanh approximation), c_proj: 4 dim -> dim
//   lm_head: Linear(dim, vocab, no bias), its weight tied to wte's
//
// Parameter names are Hugging Face's: transformer.wte.weight, transformer.h.0.attn.c_attn.weight,
// ..., transformer.ln_f.bias, lm_head.weight. The attention reads q, k and v in place from
// c_attn's output (flash attention where the backend has it), so c_attn stays one matrix.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/batch_norm.h"
#include "nn/containers.h"
#include "nn/layers.h"

namespace vitrine::models {

/// GPT-2's hyperparameters under nanoGPT's names (Hugging Face: n_positions = block_size,
/// n_embd, n_layer, n_head, embd/attn/resid_pdrop = dropout, layer_norm_epsilon).
struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // the longest context (the position embedding's rows)
  int64_t n_layer = 12, n_head = 12, n_embd = 768;
  /// After the embeddings, on the attention probabilities, after each c_proj. Hugging Face's
  /// GPT-2 configs say 0.1; nanoGPT fine-tunes with 0, which is the default here.
  double dropout = 0;
  double layer_norm_eps = 1e-5;

  /// A preset by name: "gpt2" (124M: 12 layers, 12 heads, 768), "gpt2-medium" (350M: 24, 16,
  /// 1024), "gpt2-large" (774M: 36, 20, 1280), "gpt2-xl" (1558M: 48, 25, 1600), and minGPT's
  /// small ones with GPT-2's vocabulary: "gpt-mini" (6, 6, 192), "gpt-micro" (4, 4, 128),
  /// "gpt-nano" (3, 3, 48). Unknown names get an error that lists these.
  static GPTConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
  /// {"vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout",
  /// "layer_norm_eps"}; from_json starts from "preset" when given and rejects unknown keys.
  nlohmann::json to_json() const;
  static GPTConfig from_json(const nlohmann::json& j);
  /// Throws Error when a size is not positive or n_embd is not a multiple of n_head.
  void validate() const;
};

/// The keys and values of every layer for generation: k[l], v[l] [B, n_head, block_size,
/// head_dim], of which positions [0, length) hold the tokens seen so far. Made by GPT::forward
/// on its first call with a cache; reset() empties it.
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t length = 0;
  void reset() { k.clear(), v.clear(), length = 0; }
};

/// Causal multi-head self-attention with GPT-2's names: c_attn (dim -> 3 dim), c_proj.
class CausalSelfAttention : public nn::Module {
 public:
  CausalSelfAttention(const GPTConfig& c, Generator& gen);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor(), nullptr, 0); }
  /// x [B, T, dim] -> residual + c_proj(attention) [B, T, dim] (residual undefined: none). With
  /// a cache, x holds positions [cache->length, cache->length + T): their keys and values are
  /// written into layer `layer` of the cache and the queries attend to every cached position up
  /// to their own. The caller advances cache->length.
  Tensor forward(const Tensor& x, const Tensor& residual, KVCache* cache, int64_t layer);
  std::string type_name() const override { return "CausalSelfAttention"; }
  std::shared_ptr<nn::Linear> c_attn, c_proj;
  std::shared_ptr<nn::Dropout> resid_dropout;
  int64_t n_head;
  double attn_dropout;
  Generator* gen;
};

/// GPT-2's MLP: c_fc (dim -> 4 dim), GELU with the tanh approximation, c_proj, dropout. When
/// nothing observes its inside (no hooks, no dropout in training) it runs as one op, ops::mlp.
class GPTMLP : public nn::Module {
 public:
  GPTMLP(const GPTConfig& c, Generator& gen);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  /// residual + forward(x) (residual undefined: none), the residual added as c_proj writes.
  Tensor forward(const Tensor& x, const Tensor& residual);
  std::string type_name() const override { return "GPTMLP"; }
  std::shared_ptr<nn::Linear> c_fc, c_proj;
  std::shared_ptr<nn::GELU> act;
  std::shared_ptr<nn::Dropout> dropout;
};

/// x + attn(ln_1(x)), then + mlp(ln_2(.)).
class GPTBlock : public nn::Module {
 public:
  GPTBlock(const GPTConfig& c, Generator& gen);
  Tensor forward(const Tensor& x) override { return forward(x, nullptr, 0); }
  Tensor forward(const Tensor& x, KVCache* cache, int64_t layer);
  std::string type_name() const override { return "GPTBlock"; }
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<GPTMLP> mlp;
};

/// How GPT::generate picks each new token (Hugging Face's sampling warpers, in their order):
/// logits / temperature, then the top_k largest kept (0: all; ties with the k-th kept, as
/// nanoGPT), then the smallest set of likeliest tokens whose probabilities sum to top_p or more
/// (at least one), then one draw from the renormalised softmax (inverse CDF in token order).
/// temperature 0 is greedy: the argmax, no draw.
struct GenerateOptions {
  int64_t max_new_tokens = 20;
  double temperature = 1;
  int64_t top_k = 0;
  double top_p = 1;
  uint64_t seed = 0;  // the draws' Generator(seed): the same seed, the same tokens
  /// With the key/value cache, each new token costs one position's forward, not the context's.
  bool use_cache = true;
  /// When set, the draws come from here (values in [0, 1)) instead of the seed: a test's hook
  /// for replaying a reference's random numbers.
  std::function<double()> uniform;
};

/// GPT-2 with a language-model head. forward(idx [B, T]) -> logits [B, T, vocab_size].
class GPT : public nn::Module {
 public:
  /// Initialised as GPT-2 (nn::init::gpt2_), lm_head tied to transformer.wte.
  explicit GPT(const GPTConfig& c, Generator& gen = default_generator());
  Tensor forward(const Tensor& idx) override { return forward(idx, nullptr); }
  /// With a cache, idx holds the next T tokens after the cache's length (which this advances).
  Tensor forward(const Tensor& idx, KVCache* cache);
  /// ln_f's output [B, T, n_embd], before the head (forward = lm_head(hidden)).
  Tensor hidden(const Tensor& idx, KVCache* cache = nullptr);
  /// The mean next-token loss (nanoGPT's): cross_entropy(logits [B*T, V], targets [B*T]),
  /// targets -1 ignored. logits_out, when given, receives the logits.
  Tensor loss(const Tensor& idx, const Tensor& targets, Tensor* logits_out = nullptr);
  /// Extends each row of idx [B, T] int64 by max_new_tokens tokens, chosen as GenerateOptions
  /// says, under no-grad and in eval mode (the mode is restored). Returns [B, T + max_new_tokens].
  /// Past block_size tokens the context is cropped to the last block_size (nanoGPT's rule), and
  /// each further step runs the whole cropped context (positions shift, so no cache applies).
  Tensor generate(const Tensor& idx, const GenerateOptions& options = {});
  std::string type_name() const override { return "GPT"; }
  std::string extra_repr() const override;

  GPTConfig config;
  std::shared_ptr<nn::Module> transformer;  // holds wte, wpe, drop, h, ln_f
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;
};

/// A GPT from a safetensors file that holds its config (vitrine.config: GPTConfig's JSON, as
/// tools/convert/convert.py writes for a Hugging Face GPT-2 and save_gpt for ours) and every
/// weight in Vitrine's names. Errors name the file and what is missing or does not fit.
std::shared_ptr<GPT> load_gpt(const std::string& path);
/// Writes model's weights with its config (vitrine.config, vitrine.model = "gpt"), atomically.
void save_gpt(const std::string& path, const GPT& model);

/// The next token of each row of logits [B, V] under options (temperature, top_k, top_p), with
/// u[b] in [0, 1) the draw of row b (ignored when greedy). GPT::generate's step, exposed so that
/// it can be tested and reused.
std::vector<int64_t> sample_next_tokens(const Tensor& logits, const GenerateOptions& options,
                                        const std::vector<double>& u);

}  // namespace vitrine::models
