// nn::MultiheadAttention and the Transformer modules (encoder/decoder layers, the stacks,
// nn::Transformer) against PyTorch 1.13 (tests/fixtures/transformer.json, made by
// tests/fixtures/make_transformer_fixtures.py): PyTorch's weights loaded by name, the outputs, the
// input gradients and every parameter gradient of sum(out * r) compared in float64 (1e-10) and
// float32 (1e-5); float64 gradchecks; masks, clones, init and the bad-input messages.
#include <cmath>
#include <map>

#include "nn/multihead_attention.h"
#include "nn/transformer.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;
using nlohmann::json;

namespace {
const char* kFile = "transformer.json";
using Tensors = std::map<std::string, Tensor>;
/// Runs a module on a case's inputs and masks; returns its outputs by the fixture's names.
using Run = std::function<Tensors(nn::Module&, const Tensors& inputs, const Tensors& masks)>;

Tensor get(const Tensors& t, const std::string& name) {
  auto it = t.find(name);
  return it == t.end() ? Tensor() : it->second;
}

/// A fixture mask: bool (true = not allowed) or float in dtype.
Tensor mask_of(const json& j, DType dtype) {
  const Tensor t = fixture_tensor(j);
  if (j.at("dtype").get<std::string>() == "bool") return ops::ne(t, ops::scalar(0, kFloat64));
  return t.to(dtype);
}

/// The case's state dict loaded into m (converted to dtype) by PyTorch's names, its inputs
/// (requiring grad) and masks in dtype; checks that m's state_dict keys are PyTorch's, in order.
void load(nn::Module& m, const json& c, DType dtype, Tensors& inputs, Tensors& masks) {
  m.to(dtype);
  std::vector<std::string> keys;
  for (auto& item : m.state_dict()) keys.push_back(item.first);
  CHECK(keys == c.at("state_dict_keys").get<std::vector<std::string>>());
  load_fixture_state(m, c.at("params"));
  m.zero_grad();
  m.eval();
  for (auto& item : c.at("inputs").items()) {
    const std::string k = item.key();
    auto& v = item.value();
    Tensor t = fixture_tensor(v, dtype);
    t.requires_grad_();
    inputs[k] = t;
  }
  for (auto& [k, v] : c.at("masks").items()) masks[k] = mask_of(v, dtype);
}

/// Outputs, input gradients and parameter gradients of sum_o sum(out_o * r_o) against PyTorch,
/// in float64 at 1e-10 and in float32 at 1e-5.
void check_parity(nn::Module& m, const std::string& name, const Run& run) {
  const json& c = fixture_case(kFile, name);
  for (auto item : {std::pair{kFloat64, 1e-10}, std::pair{kFloat32, 1e-5}}) {
    const auto dtype = item.first;
    const auto tol = item.second;
    INFO(name << " in " << dtype_name(dtype));
    Tensors inputs, masks;
    load(m, c, dtype, inputs, masks);
    const Tensors outs = run(m, inputs, masks);
    CHECK(outs.size() == c.at("outputs").size());
    Tensor loss;
    for (auto& item : c.at("outputs").items()) {
      const std::string k = item.key();
      auto& ref = item.value();
      INFO("output " << k);
      const Tensor y = get(outs, k);
      REQUIRE(y.defined());
      CHECK(y.dtype() == dtype);
      const Tensor expected = fixture_tensor(ref);
      REQUIRE(y.shape() == expected.shape());
      check_close(y.to(kFloat64), expected, tol, tol);
      const Tensor term = ops::sum(y * fixture_tensor(c.at("r").at(k), dtype));
      loss = loss.defined() ? loss + term : term;
    }
    loss.backward();
    for (auto& item : c.at("input_grads").items()) {
      const std::string k = item.key();
      auto& ref = item.value();
      INFO("gradient of input " << k);
      REQUIRE(inputs.at(k).grad().defined());
      check_close(inputs.at(k).grad().to(kFloat64), fixture_tensor(ref), tol, tol);
    }
    const auto params = m.named_parameters();
    CHECK(params.size() == c.at("param_grads").size());
    for (auto& item : params) {
      const std::string& n = item.first;
      const Tensor& p = item.second;
      INFO("gradient of " << n);
      REQUIRE(p.grad().defined());
      check_close(p.grad().to(kFloat64), fixture_tensor(c.at("param_grads").at(n)), tol, tol);
    }
  }
}

std::shared_ptr<nn::MultiheadAttention> mha_of(const json& config) {
  return std::make_shared<nn::MultiheadAttention>(
      config.at("embed_dim").get<int64_t>(), config.at("num_heads").get<int64_t>(), 0.0,
      config.at("bias").get<bool>(), false, false, config.at("kdim").get<int64_t>(),
      config.at("vdim").get<int64_t>(), config.at("batch_first").get<bool>());
}

Run mha_run(const json& call) {
  const bool need = call.at("need_weights").get<bool>();
  const bool average = call.at("average_attn_weights").get<bool>();
  return [need, average](nn::Module& m, const Tensors& in, const Tensors& masks) {
    auto& mha = dynamic_cast<nn::MultiheadAttention&>(m);
    const Tensor q = in.at("query");
    const Tensor k = in.count("key") ? in.at("key") : q;  // self-attention: one tensor
    const Tensor v = in.count("value") ? in.at("value") : q;
    auto [out, w] = mha.forward(q, k, v, get(masks, "key_padding_mask"), need,
                                get(masks, "attn_mask"), average);
    Tensors res{{"output", out}};
    if (need) res["weights"] = w;
    CHECK(w.defined() == need);
    return res;
  };
}

template <typename Layer>
std::shared_ptr<Layer> layer_of(const json& config) {
  return std::make_shared<Layer>(
      config.at("d_model").get<int64_t>(), config.at("nhead").get<int64_t>(),
      config.at("dim_feedforward").get<int64_t>(), 0.0, config.at("activation").get<std::string>(),
      config.at("layer_norm_eps").get<double>(), config.at("batch_first").get<bool>(),
      config.at("norm_first").get<bool>());
}

/// A bool mask from 0/1 values (true = not allowed).
Tensor bool_mask(const std::vector<double>& values, const Dims& shape) {
  return ops::ne(ops::from_vector(values, shape, kFloat64), ops::scalar(0, kFloat64));
}

/// Every element of t (float64) within [-bound, bound], and not all zero.
void check_within(const Tensor& t, double bound) {
  const auto v = t.to(kFloat64).to_vector<double>();
  double top = 0;
  for (double x : v) top = std::max(top, std::abs(x));
  CHECK(top <= bound);
  CHECK(top > 0.5 * bound);
}
}  // namespace

TEST_CASE(
    "multihead_attention: PyTorch parity (kdim, vdim, bool and float masks 2-D and 3-D, padding, "
    "batch_first, weights)") {
  for (const char* name : {"mha_kdim_vdim_bool_masks", "mha_kdim_vdim_float_3d_batch_first",
                           "mha_packed_bool_3d", "mha_float_2d_no_bias_no_weights",
                           "mha_self_attention_float_padding_batch_first", "mha_unbatched"}) {
    const json& c = fixture_case(kFile, name);
    auto m = mha_of(c.at("config"));
    check_parity(*m, name, mha_run(c.at("call")));
  }
}

TEST_CASE("multihead_attention: float64 gradcheck of inputs and parameters, masked, with weights") {
  nn::MultiheadAttention m(6, 2, 0.0, true, false, false, 4, 3);
  m.to(kFloat64);
  const int64_t L = 3, S = 4, N = 2;
  const Tensor kpm = bool_mask({0, 0, 0, 0, 0, 0, 0, 1}, {N, S});  // batch 1's last key padded
  const Tensor attn_mask = rand64({L, S}, 5, 0.5).detach();
  const Tensor r = rand64({N, L, S}, 6).detach();
  std::vector<Tensor> inputs{rand64({L, N, 6}, 1), rand64({S, N, 4}, 2), rand64({S, N, 3}, 3)};
  for (auto& [n, p] : m.named_parameters()) {
    NoGradGuard ng;
    p.copy_(p + 0.1 * rand64(p.shape(), 11).detach());
    inputs.push_back(p);
  }
  check_grad(
      [&](const std::vector<Tensor>& t) {
        auto [out, w] = m.forward(t[0], t[1], t[2], kpm, true, attn_mask);
        return ops::cat({out.flatten(), (w * r).flatten()}, 0);
      },
      inputs);
}

TEST_CASE(
    "transformer layers: PyTorch parity of the encoder and decoder layers (post- and pre-norm, "
    "relu and gelu, masks and padding)") {
  for (const char* name :
       {"encoder_layer_relu_post_norm", "encoder_layer_gelu_pre_norm_batch_first"}) {
    auto m = layer_of<nn::TransformerEncoderLayer>(fixture_case(kFile, name).at("config"));
    check_parity(*m, name, [](nn::Module& mod, const Tensors& in, const Tensors& masks) {
      auto& layer = dynamic_cast<nn::TransformerEncoderLayer&>(mod);
      return Tensors{{"output", layer.forward(in.at("src"), get(masks, "src_mask"),
                                              get(masks, "src_key_padding_mask"))}};
    });
  }
  for (const char* name :
       {"decoder_layer_relu_post_norm", "decoder_layer_gelu_pre_norm_batch_first"}) {
    auto m = layer_of<nn::TransformerDecoderLayer>(fixture_case(kFile, name).at("config"));
    check_parity(*m, name, [](nn::Module& mod, const Tensors& in, const Tensors& masks) {
      auto& layer = dynamic_cast<nn::TransformerDecoderLayer&>(mod);
      return Tensors{
          {"output", layer.forward(in.at("tgt"), in.at("memory"), get(masks, "tgt_mask"),
                                   get(masks, "memory_mask"), get(masks, "tgt_key_padding_mask"),
                                   get(masks, "memory_key_padding_mask"))}};
    });
  }
}

TEST_CASE("transformer layers: float64 gradcheck of an encoder layer and a decoder layer") {
  nn::TransformerEncoderLayer enc(4, 2, 6, 0.0, "gelu", 1e-5, false, true);
  enc.to(kFloat64);
  const Tensor causal = nn::Transformer::generate_square_subsequent_mask(3, kFloat64);
  std::vector<Tensor> inputs{rand64({3, 2, 4}, 1)};
  for (auto& item : enc.named_parameters()) {
    auto& p = item.second;
    NoGradGuard ng;
    p.copy_(p + 0.1 * rand64(p.shape(), 12).detach());
    inputs.push_back(p);
  }
  check_grad([&](const std::vector<Tensor>& t) { return enc.forward(t[0], causal); }, inputs);
  nn::TransformerDecoderLayer dec(4, 2, 6, 0.0, "relu");
  dec.to(kFloat64);
  check_grad(
      [&](const std::vector<Tensor>& t) { return dec.forward(t[0], t[1], causal, Tensor()); },
      {rand64({3, 2, 4}, 2), rand64({5, 2, 4}, 3)});
}

TEST_CASE("transformer: PyTorch parity of a 2-layer TransformerEncoder and the full Transformer") {
  {
    const json& config = fixture_case(kFile, "encoder_two_layers_norm").at("config");
    auto layer = layer_of<nn::TransformerEncoderLayer>(config);
    nn::TransformerEncoder m(*layer, 2, std::make_shared<nn::LayerNorm>(8));
    check_parity(m, "encoder_two_layers_norm",
                 [](nn::Module& mod, const Tensors& in, const Tensors& masks) {
                   auto& e = dynamic_cast<nn::TransformerEncoder&>(mod);
                   return Tensors{{"output", e.forward(in.at("src"), get(masks, "mask"),
                                                       get(masks, "src_key_padding_mask"))}};
                 });
  }
  const json& config = fixture_case(kFile, "transformer").at("config");
  nn::Transformer m(8, 2, config.at("num_encoder_layers").get<int64_t>(),
                    config.at("num_decoder_layers").get<int64_t>(), 16, 0.0, "relu", 1e-5,
                    config.at("batch_first").get<bool>(), config.at("norm_first").get<bool>());
  check_parity(m, "transformer", [](nn::Module& mod, const Tensors& in, const Tensors& masks) {
    auto& t = dynamic_cast<nn::Transformer&>(mod);
    const Tensor tgt = in.at("tgt");
    const Tensor tgt_mask =
        nn::Transformer::generate_square_subsequent_mask(tgt.size(0), tgt.dtype());
    return Tensors{{"output", t.forward(in.at("src"), tgt, Tensor(), tgt_mask, Tensor(),
                                        get(masks, "src_key_padding_mask"), Tensor(),
                                        get(masks, "memory_key_padding_mask"))}};
  });
}

TEST_CASE("transformer: batch_first and unbatched inputs give the sequence-first results") {
  Generator gen(3);
  nn::Transformer seq(8, 2, 1, 2, 12, 0.0, "gelu", 1e-5, false, true, gen);
  nn::Transformer bf(8, 2, 1, 2, 12, 0.0, "gelu", 1e-5, true, true, gen);
  seq.to(kFloat64);
  bf.to(kFloat64);
  nn::load_state_dict(bf, seq.state_dict());
  const Tensor src = rand64({5, 3, 8}, 1).detach(), tgt = rand64({4, 3, 8}, 2).detach();
  const Tensor tgt_mask = nn::Transformer::generate_square_subsequent_mask(4, kFloat64);
  const Tensor kpm = bool_mask({0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, {3, 5});
  const Tensor y = seq.forward(src, tgt, Tensor(), tgt_mask, Tensor(), kpm, Tensor(), kpm);
  CHECK(y.shape() == Dims{4, 3, 8});
  const Tensor y_bf = bf.forward(src.transpose(0, 1), tgt.transpose(0, 1), Tensor(), tgt_mask,
                                 Tensor(), kpm, Tensor(), kpm);
  CHECK(y_bf.shape() == Dims{3, 4, 8});
  check_close(y_bf.transpose(0, 1).contiguous(), y, 1e-12, 1e-12);
  // unbatched: the batch's second sequence alone (with its padding as a [S] mask)
  const Tensor y1 = seq.forward(src.select(1, 1), tgt.select(1, 1), Tensor(), tgt_mask, Tensor(),
                                kpm.select(0, 1), Tensor(), kpm.select(0, 1));
  CHECK(y1.shape() == Dims{4, 8});
  check_close(y1, y.select(1, 1).contiguous(), 1e-12, 1e-12);
  // padding hides keys: the padded source positions' values do not matter
  Tensor src2 = src.clone();
  {
    NoGradGuard ng;
    src2.select(1, 1).narrow(0, 3, 2).fill_(7.0);
  }
  check_close(seq.forward(src2, tgt, Tensor(), tgt_mask, Tensor(), kpm, Tensor(), kpm), y, 1e-12,
              1e-12);
}

TEST_CASE("transformer: generate_square_subsequent_mask as PyTorch's, is_causal as that mask") {
  const json& sq = fixture_json(kFile).at("square_subsequent_mask");
  const Tensor m = nn::Transformer::generate_square_subsequent_mask(4);
  CHECK(m.dtype() == kFloat32);
  CHECK(m.shape() == Dims(sq.at("shape").get<std::vector<int64_t>>()));
  const auto v = m.to_vector<double>();
  const auto inf = sq.at("is_neg_inf").get<std::vector<int>>();
  REQUIRE(v.size() == inf.size());
  for (size_t i = 0; i < v.size(); ++i) {
    INFO("element " << i);
    CHECK((inf[i] ? v[i] == -INFINITY : v[i] == 0.0));
  }
  CHECK(nn::Transformer::generate_square_subsequent_mask(3, kFloat64).dtype() == kFloat64);
  // is_causal without a mask is that mask (as a float, or as its bool form)
  nn::MultiheadAttention mha(6, 3);
  mha.to(kFloat64);
  const Tensor x = rand64({4, 2, 6}, 1).detach();
  const Tensor causal = nn::Transformer::generate_square_subsequent_mask(4, kFloat64);
  auto [a, wa] = mha.forward(x, x, x, Tensor(), true, causal);
  auto [b, wb] = mha.forward(x, x, x, Tensor(), true, Tensor(), true, true);
  auto [c, wc] = mha.forward(x, x, x, Tensor(), true, ops::lt(causal, ops::scalar(0, kFloat64)));
  check_close(b, a, 1e-14, 1e-14);
  check_close(c, a, 1e-14, 1e-14);
  check_close(wb, wa, 1e-14, 1e-14);
  CHECK(wa.select(1, 0).select(1, 1).sum().item() == 0.0);  // query 0 sees key 0 only
}

TEST_CASE("multihead_attention: training dropout returns PyTorch's weights (after dropout)") {
  Generator gen(7);
  nn::MultiheadAttention m(8, 2, 0.5, true, false, false, 0, 0, false, gen);
  m.to(kFloat64);
  const Tensor x = rand64({5, 2, 8}, 1).detach();
  m.eval();
  auto [y0, p0] = m.forward(x, x, x, Tensor(), true, Tensor(), false);
  m.train();
  auto [y1, p1] = m.forward(x, x, x, Tensor(), true, Tensor(), false);
  CHECK(p1.shape() == Dims{2, 2, 5, 5});
  // every weight is dropped (0) or kept and scaled by 1 / (1 - p) = 2
  const auto a = p0.to_vector<double>(), b = p1.to_vector<double>();
  int dropped = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool ok = b[i] == 0.0 || std::abs(b[i] - 2 * a[i]) < 1e-14;
    CHECK(ok);
    dropped += b[i] == 0.0;
  }
  CHECK(dropped > 10);
  CHECK(dropped < 90);
  // the output is made from those weights: out_proj(weights v)
  const Tensor v =
      ops::linear(x, m.in_proj_weight.slice(0, 16, 24), m.in_proj_bias.slice(0, 16, 24))
          .reshape({5, 2, 2, 4})
          .permute({1, 2, 0, 3});  // [N, H, S, Dh]
  const Tensor heads = ops::matmul(p1, v).permute({2, 0, 1, 3}).reshape({5, 2, 8});
  check_close(y1, (*m.out_proj)(heads), 1e-12, 1e-12);
  // eval is deterministic and needs no generator draws
  const uint64_t offset = gen.offset();
  m.eval();
  check_close(m.forward(x).contiguous(), y0, 1e-14, 1e-14);
  CHECK(gen.offset() == offset);
}

TEST_CASE("multihead_attention: PyTorch's init and parameter shapes") {
  nn::MultiheadAttention packed(12, 3);
  CHECK(packed.in_proj_weight.shape() == Dims{36, 12});
  CHECK(!packed.q_proj_weight.defined());
  check_within(packed.in_proj_weight, std::sqrt(6.0 / (12 + 36)));
  CHECK(ops::sum(ops::abs(packed.in_proj_bias)).item() == 0.0);
  CHECK(ops::sum(ops::abs(packed.out_proj->bias)).item() == 0.0);
  nn::MultiheadAttention split(12, 3, 0.0, false, false, false, 5, 7);
  CHECK(!split.in_proj_weight.defined());
  CHECK(!split.in_proj_bias.defined());
  CHECK(!split.out_proj->bias.defined());
  CHECK(split.k_proj_weight.shape() == Dims{12, 5});
  CHECK(split.v_proj_weight.shape() == Dims{12, 7});
  check_within(split.k_proj_weight, std::sqrt(6.0 / (12 + 5)));
  check_within(split.v_proj_weight, std::sqrt(6.0 / (12 + 7)));
  CHECK(split.extra_repr() == "embed_dim=12, num_heads=3, kdim=5, vdim=7, bias=false");
}

TEST_CASE(
    "transformer: stacks clone the given layer, Transformer resets every matrix by "
    "xavier_uniform_") {
  Generator gen(5);
  nn::TransformerEncoderLayer layer(8, 2, 16, 0.2, "relu", 1e-5, false, false, gen);
  layer.to(kFloat64);
  nn::TransformerEncoder enc(layer, 3);
  CHECK(enc.layers->size() == 3);
  CHECK(enc.norm == nullptr);
  const auto proto = layer.state_dict();
  for (size_t i = 0; i < 3; ++i) {
    const auto copy = enc.layer(i)->state_dict();
    REQUIRE(copy.size() == proto.size());
    for (size_t k = 0; k < proto.size(); ++k) {
      INFO("layer " << i << " " << proto[k].first);
      CHECK(copy[k].second.dtype() == kFloat64);
      CHECK(!copy[k].second.same(proto[k].second));
      CHECK(copy[k].second.data_ptr() != proto[k].second.data_ptr());
      check_close(copy[k].second, proto[k].second, 0, 0);
    }
    CHECK(&enc.layer(i)->dropout1->generator() == &gen);
    CHECK(&enc.layer(i)->self_attn->generator() == &gen);
    CHECK(enc.layer(i)->self_attn->dropout == 0.2);
  }
  {  // the copies are independent
    NoGradGuard ng;
    enc.layer(0)->linear1->weight.fill_(1.0);
  }
  CHECK(enc.layer(1)->linear1->weight.to_vector<double>() !=
        enc.layer(0)->linear1->weight.to_vector<double>());
  CHECK(layer.linear1->weight.to_vector<double>() ==
        enc.layer(1)->linear1->weight.to_vector<double>());

  nn::Transformer t(8, 2, 2, 1, 16, 0.1, "relu", 1e-5, false, false, gen);
  CHECK(t.encoder->norm != nullptr);
  CHECK(t.decoder->norm != nullptr);
  CHECK(t.decoder->layers->size() == 1);
  for (auto& item : t.named_parameters()) {
    const std::string& n = item.first;
    const Tensor& p = item.second;
    INFO(n);
    if (p.dim() > 1) {
      const auto [fan_in, fan_out] = nn::init::fan_in_out(p);
      check_within(p, std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
    }
  }
  // reset one by one: the encoder's layers no longer equal each other
  CHECK(t.encoder->layer(0)->linear1->weight.to_vector<double>() !=
        t.encoder->layer(1)->linear1->weight.to_vector<double>());
  CHECK(t.state_dict().front().first == "encoder.layers.0.self_attn.in_proj_weight");
  CHECK(t.state_dict().back().first == "decoder.norm.bias");
}

TEST_CASE("transformer: bad shapes, masks and arguments name what was given and expected") {
  CHECK_ERROR_CONTAINS(nn::MultiheadAttention(10, 3), "MultiheadAttention",
                       "embed_dim 10 is not divisible by num_heads 3");
  CHECK_ERROR_CONTAINS(nn::MultiheadAttention(12, 3, 0.0, true, true), "add_bias_kv");
  CHECK_ERROR_CONTAINS(nn::MultiheadAttention(12, 3, 0.0, true, false, true), "add_zero_attn");
  nn::MultiheadAttention m(12, 3, 0.0, true, false, false, 5, 7);
  const Tensor q = ops::zeros({5, 2, 12}), k = ops::zeros({7, 2, 5}), v = ops::zeros({7, 2, 7});
  CHECK_ERROR_CONTAINS(m.forward(ops::zeros({5, 2, 11}), k, v), "MultiheadAttention",
                       "width 11, expected embed_dim 12");
  CHECK_ERROR_CONTAINS(m.forward(q, v, v), "kdim 5", "vdim 7");
  CHECK_ERROR_CONTAINS(m.forward(ops::zeros({2, 5, 2, 12}), k, v), "expected a batched query",
                       "[L, N, E]");
  CHECK_ERROR_CONTAINS(m.forward(q, ops::zeros({7, 12, 5}).slice(1, 0, 3), v),
                       "the query's batch 2");
  CHECK_ERROR_CONTAINS(m.forward(q, k, v, Tensor(), true, ops::zeros({4, 7}, kBool)),
                       "attn_mask must be [L, S] = [5, 7] or [N * num_heads, L, S] = [6, 5, 7]",
                       "got [4, 7]");
  CHECK_ERROR_CONTAINS(m.forward(q, k, v, ops::zeros({2, 6}, kBool)),
                       "key_padding_mask must be [2, 7]");
  CHECK_ERROR_CONTAINS(m.forward(q, k, v, Tensor(), true, ops::zeros({5, 7}, kFloat64)),
                       "a float attn_mask must have the query's dtype float32");
  CHECK_ERROR_CONTAINS(m.forward(q, k, v, Tensor(), true, ops::zeros({5, 7}, kInt64)),
                       "attn_mask must be bool or floating point");
  CHECK_ERROR_CONTAINS(nn::TransformerEncoderLayer(8, 2, 16, 0.1, "tanh"),
                       "activation should be relu/gelu, not tanh");
  CHECK_ERROR_CONTAINS(nn::TransformerDecoderLayer(8, 3), "d_model 8 is not divisible by nhead 3");
  nn::Transformer t(8, 2, 1, 1, 16);
  CHECK_ERROR_CONTAINS(t.forward(ops::zeros({5, 2, 8}), ops::zeros({4, 3, 8})),
                       "the batch number of src and tgt must be equal");
  CHECK_ERROR_CONTAINS(t.forward(ops::zeros({5, 2, 8}), ops::zeros({4, 2, 6})),
                       "the feature number of src and tgt must be equal to d_model 8");
}

TEST_CASE("transformer: on the GPU as on the CPU (float64, masks, outputs and every gradient)") {
  if (!gpu_or_skip()) return;
  const Device gpu = Device::parse("cuda");
  Generator gen(9);
  nn::Transformer cpu(8, 2, 2, 2, 16, 0.0, "gelu", 1e-5, false, true, gen);
  nn::Transformer dev(8, 2, 2, 2, 16, 0.0, "gelu", 1e-5, false, true, gen);
  nn::MultiheadAttention mha_cpu(12, 3, 0.0, true, false, false, 5, 7, true, gen);
  nn::MultiheadAttention mha_dev(12, 3, 0.0, true, false, false, 5, 7, true, gen);
  for (auto [a, b] : {std::pair<nn::Module*, nn::Module*>{&cpu, &dev}, {&mha_cpu, &mha_dev}}) {
    a->to(kFloat64);
    b->to(kFloat64);
    nn::load_state_dict(*b, a->state_dict());
    b->to(gpu);
  }
  const Tensor kpm = bool_mask({0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {2, 5});
  const Tensor tgt_mask = nn::Transformer::generate_square_subsequent_mask(4, kFloat64);
  const Tensor attn_mask = bool_mask({0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, {3, 5});
  const std::vector<Tensor> host{rand64({5, 2, 8}, 1), rand64({4, 2, 8}, 2), rand64({2, 3, 12}, 3),
                                 rand64({2, 5, 5}, 4), rand64({2, 5, 7}, 5)};
  const Tensor r = rand64({4, 2, 8}, 6).detach(), rw = rand64({2, 3, 3, 5}, 7).detach();
  const auto run = [&](nn::Transformer& t, nn::MultiheadAttention& m, const Device& d) {
    std::vector<Tensor> x;
    for (const Tensor& h : host) {
      Tensor c = h.detach().to(d);
      c.requires_grad_();
      x.push_back(c);
    }
    const Tensor y =
        t.forward(x[0], x[1], Tensor(), tgt_mask.to(d), Tensor(), kpm.to(d), Tensor(), kpm.to(d));
    auto [o, w] = m.forward(x[2], x[3], x[4], kpm.to(d), true, attn_mask.to(d), false);
    (ops::sum(y * r.to(d)) + ops::sum(w * rw.to(d)) + ops::sum(o)).backward();
    std::vector<Tensor> res{y, o, w};
    for (const Tensor& xi : x) res.push_back(xi.grad());
    for (auto& [n, p] : t.named_parameters()) res.push_back(p.grad());
    for (auto& [n, p] : m.named_parameters()) res.push_back(p.grad());
    return res;
  };
  const auto a = run(cpu, mha_cpu, kCPU), b = run(dev, mha_dev, gpu);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("result " << i);
    REQUIRE(b[i].device() == gpu);
    check_close(b[i].to(kCPU), a[i], 1e-9, 1e-9);
  }
}
