// The Transformer encoder/decoder layers, their stacks and nn::Transformer (see transformer.h for
// the computation and the names).
#include "nn/transformer.h"

#include <limits>

#include "autograd/grad_mode.h"
#include "nn/init.h"
#include "ops/ops.h"

namespace vitrine::nn {

namespace {
void check_activation(const std::string& activation, const char* op) {
  VT_CHECK(activation == "relu" || activation == "gelu",
           "{}: activation should be relu/gelu, not {}", op, activation);
}

Tensor activate(const std::string& activation, const Tensor& x) {
  return activation == "gelu" ? ops::gelu(x) : ops::relu(x);
}

/// Copies every parameter's and buffer's values (and requires_grad) of from into to, which has the
/// same structure, into tensors of to's own (their dtype and device too), and from's mode.
void copy_state(const Module& from, Module& to) {
  const NamedTensors src = from.state_dict();
  NamedTensors dst = to.state_dict();
  VT_ASSERT(src.size() == dst.size());
  NoGradGuard no_grad;
  for (size_t i = 0; i < src.size(); ++i) {
    VT_ASSERT(src[i].first == dst[i].first);
    const bool grad = dst[i].second.requires_grad() && src[i].second.requires_grad();
    set_data(dst[i].second, src[i].second.detach().clone());
    if (!grad) dst[i].second.requires_grad_(false);
  }
  to.train(from.is_training());
}

void check_d_model(int64_t d_model, int64_t nhead, int64_t dim_feedforward, const char* op) {
  VT_CHECK(d_model > 0 && nhead > 0 && dim_feedforward > 0,
           "{}: d_model, nhead and dim_feedforward must be positive, got {}, {}, {}", op, d_model,
           nhead, dim_feedforward);
  VT_CHECK(d_model % nhead == 0, "{}: d_model {} is not divisible by nhead {}", op, d_model, nhead);
}

std::string layer_repr(int64_t d_model, int64_t nhead, int64_t ff, const std::string& act,
                       bool batch_first, bool norm_first) {
  return fmt::format("d_model={}, nhead={}, dim_feedforward={}, activation={}{}{}", d_model, nhead,
                     ff, act, batch_first ? ", batch_first=true" : "",
                     norm_first ? ", norm_first=true" : "");
}
}  // namespace

// ---- TransformerEncoderLayer -------------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(int64_t dm, int64_t heads, int64_t ff, double p,
                                                 const std::string& act, double eps, bool bf,
                                                 bool nf, Generator& gen)
    : d_model(dm),
      nhead(heads),
      dim_feedforward(ff),
      activation(act),
      layer_norm_eps(eps),
      batch_first(bf),
      norm_first(nf) {
  check_d_model(dm, heads, ff, "TransformerEncoderLayer");
  check_activation(act, "TransformerEncoderLayer");
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(
                                               dm, heads, p, true, false, false, 0, 0, bf, gen));
  linear1 = register_module("linear1", std::make_shared<Linear>(dm, ff, true, gen));
  dropout = register_module("dropout", std::make_shared<Dropout>(p, gen));
  linear2 = register_module("linear2", std::make_shared<Linear>(ff, dm, true, gen));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(dm, eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(dm, eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(p, gen));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(p, gen));
}

Tensor TransformerEncoderLayer::ff_block(const Tensor& x) {
  return (*dropout2)((*linear2)((*dropout)(activate(activation, (*linear1)(x)))));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask,
                                        const Tensor& src_key_padding_mask) {
  const auto sa = [&](const Tensor& x) {
    return (*dropout1)(self_attn->forward(x, x, x, src_key_padding_mask, false, src_mask).first);
  };
  Tensor x = src;
  if (norm_first) {
    x = x + sa((*norm1)(x));
    x = x + ff_block((*norm2)(x));
  } else {
    x = (*norm1)(x + sa(x));
    x = (*norm2)(x + ff_block(x));
  }
  return x;
}

std::shared_ptr<TransformerEncoderLayer> TransformerEncoderLayer::clone() const {
  Generator scratch;  // the copy's own init draws, overwritten below
  auto copy = std::make_shared<TransformerEncoderLayer>(d_model, nhead, dim_feedforward, dropout->p,
                                                        activation, layer_norm_eps, batch_first,
                                                        norm_first, scratch);
  copy_state(*this, *copy);
  copy->self_attn->dropout = self_attn->dropout;
  copy->self_attn->set_generator(self_attn->generator());
  for (auto [to, from] : {std::pair{copy->dropout, dropout}, std::pair{copy->dropout1, dropout1},
                          std::pair{copy->dropout2, dropout2}}) {
    to->p = from->p;
    to->set_generator(from->generator());
  }
  return copy;
}

std::string TransformerEncoderLayer::extra_repr() const {
  return layer_repr(d_model, nhead, dim_feedforward, activation, batch_first, norm_first);
}

// ---- TransformerDecoderLayer -------------------------------------------------------------------

TransformerDecoderLayer::TransformerDecoderLayer(int64_t dm, int64_t heads, int64_t ff, double p,
                                                 const std::string& act, double eps, bool bf,
                                                 bool nf, Generator& gen)
    : d_model(dm),
      nhead(heads),
      dim_feedforward(ff),
      activation(act),
      layer_norm_eps(eps),
      batch_first(bf),
      norm_first(nf) {
  check_d_model(dm, heads, ff, "TransformerDecoderLayer");
  check_activation(act, "TransformerDecoderLayer");
  const auto attention = [&] {
    return std::make_shared<MultiheadAttention>(dm, heads, p, true, false, false, 0, 0, bf, gen);
  };
  self_attn = register_module("self_attn", attention());
  multihead_attn = register_module("multihead_attn", attention());
  linear1 = register_module("linear1", std::make_shared<Linear>(dm, ff, true, gen));
  dropout = register_module("dropout", std::make_shared<Dropout>(p, gen));
  linear2 = register_module("linear2", std::make_shared<Linear>(ff, dm, true, gen));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(dm, eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(dm, eps));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(dm, eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(p, gen));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(p, gen));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(p, gen));
}

Tensor TransformerDecoderLayer::ff_block(const Tensor& x) {
  return (*dropout3)((*linear2)((*dropout)(activate(activation, (*linear1)(x)))));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const Tensor& tgt_mask, const Tensor& memory_mask,
                                        const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask) {
  const auto sa = [&](const Tensor& x) {
    return (*dropout1)(self_attn->forward(x, x, x, tgt_key_padding_mask, false, tgt_mask).first);
  };
  const auto mha = [&](const Tensor& x) {
    return (*dropout2)(
        multihead_attn->forward(x, memory, memory, memory_key_padding_mask, false, memory_mask)
            .first);
  };
  Tensor x = tgt;
  if (norm_first) {
    x = x + sa((*norm1)(x));
    x = x + mha((*norm2)(x));
    x = x + ff_block((*norm3)(x));
  } else {
    x = (*norm1)(x + sa(x));
    x = (*norm2)(x + mha(x));
    x = (*norm3)(x + ff_block(x));
  }
  return x;
}

std::shared_ptr<TransformerDecoderLayer> TransformerDecoderLayer::clone() const {
  Generator scratch;  // the copy's own init draws, overwritten below
  auto copy = std::make_shared<TransformerDecoderLayer>(d_model, nhead, dim_feedforward, dropout->p,
                                                        activation, layer_norm_eps, batch_first,
                                                        norm_first, scratch);
  copy_state(*this, *copy);
  for (auto [to, from] :
       {std::pair{copy->self_attn, self_attn}, std::pair{copy->multihead_attn, multihead_attn}}) {
    to->dropout = from->dropout;
    to->set_generator(from->generator());
  }
  for (auto [to, from] :
       {std::pair{copy->dropout, dropout}, std::pair{copy->dropout1, dropout1},
        std::pair{copy->dropout2, dropout2}, std::pair{copy->dropout3, dropout3}}) {
    to->p = from->p;
    to->set_generator(from->generator());
  }
  return copy;
}

std::string TransformerDecoderLayer::extra_repr() const {
  return layer_repr(d_model, nhead, dim_feedforward, activation, batch_first, norm_first);
}

// ---- the stacks --------------------------------------------------------------------------------

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t n,
                                       std::shared_ptr<LayerNorm> layer_norm)
    : num_layers(n) {
  VT_CHECK(n >= 1, "TransformerEncoder: num_layers must be >= 1, got {}", n);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < n; ++i) layers->push_back(encoder_layer.clone());
  if (layer_norm) norm = register_module("norm", std::move(layer_norm));
}

std::shared_ptr<TransformerEncoderLayer> TransformerEncoder::layer(size_t i) const {
  return layers->at<TransformerEncoderLayer>(i);
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask,
                                   const Tensor& src_key_padding_mask) {
  Tensor x = src;
  for (size_t i = 0; i < layers->size(); ++i) x = layer(i)->forward(x, mask, src_key_padding_mask);
  return norm ? (*norm)(x) : x;
}

std::string TransformerEncoder::extra_repr() const {
  return fmt::format("num_layers={}{}", num_layers, norm ? ", norm" : "");
}

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t n,
                                       std::shared_ptr<LayerNorm> layer_norm)
    : num_layers(n) {
  VT_CHECK(n >= 1, "TransformerDecoder: num_layers must be >= 1, got {}", n);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < n; ++i) layers->push_back(decoder_layer.clone());
  if (layer_norm) norm = register_module("norm", std::move(layer_norm));
}

std::shared_ptr<TransformerDecoderLayer> TransformerDecoder::layer(size_t i) const {
  return layers->at<TransformerDecoderLayer>(i);
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask) {
  Tensor x = tgt;
  for (size_t i = 0; i < layers->size(); ++i)
    x = layer(i)->forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                          memory_key_padding_mask);
  return norm ? (*norm)(x) : x;
}

std::string TransformerDecoder::extra_repr() const {
  return fmt::format("num_layers={}{}", num_layers, norm ? ", norm" : "");
}

// ---- Transformer -------------------------------------------------------------------------------

Transformer::Transformer(int64_t dm, int64_t heads, int64_t num_encoder_layers,
                         int64_t num_decoder_layers, int64_t ff, double p, const std::string& act,
                         double eps, bool bf, bool nf, Generator& gen)
    : d_model(dm), nhead(heads), batch_first(bf) {
  {
    TransformerEncoderLayer layer(dm, heads, ff, p, act, eps, bf, nf, gen);
    encoder = register_module(
        "encoder", std::make_shared<TransformerEncoder>(layer, num_encoder_layers,
                                                        std::make_shared<LayerNorm>(dm, eps)));
  }
  {
    TransformerDecoderLayer layer(dm, heads, ff, p, act, eps, bf, nf, gen);
    decoder = register_module(
        "decoder", std::make_shared<TransformerDecoder>(layer, num_decoder_layers,
                                                        std::make_shared<LayerNorm>(dm, eps)));
  }
  for (const Tensor& w : parameters())
    if (w.dim() > 1) init::xavier_uniform_(w, 1, gen);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask,
                            const Tensor& tgt_mask, const Tensor& memory_mask,
                            const Tensor& src_key_padding_mask, const Tensor& tgt_key_padding_mask,
                            const Tensor& memory_key_padding_mask) {
  VT_CHECK(src.defined() && tgt.defined(), "Transformer: src and tgt must be defined");
  VT_CHECK(src.dim() == tgt.dim() && (src.dim() == 2 || src.dim() == 3),
           "Transformer: expected src and tgt both {} or both unbatched [S, E], got {} and {}",
           batch_first ? "[N, S, E]" : "[S, N, E]", src.shape(), tgt.shape());
  if (src.dim() == 3) {
    const int64_t b = batch_first ? 0 : 1;
    VT_CHECK(src.size(b) == tgt.size(b),
             "Transformer: the batch number of src and tgt must be equal, got src {} and tgt {}",
             src.shape(), tgt.shape());
  }
  VT_CHECK(src.size(-1) == d_model && tgt.size(-1) == d_model,
           "Transformer: the feature number of src and tgt must be equal to d_model {}, got src {} "
           "and tgt {}",
           d_model, src.shape(), tgt.shape());
  const Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                          memory_key_padding_mask);
}

std::string Transformer::extra_repr() const {
  return fmt::format("d_model={}, nhead={}{}", d_model, nhead,
                     batch_first ? ", batch_first=true" : "");
}

Tensor Transformer::generate_square_subsequent_mask(int64_t sz, DType dtype, Device device) {
  VT_CHECK(sz >= 0, "Transformer::generate_square_subsequent_mask: sz must be >= 0, got {}", sz);
  VT_CHECK(is_float(dtype),
           "Transformer::generate_square_subsequent_mask: dtype must be float32 or float64, got {}",
           dtype_name(dtype));
  NoGradGuard no_grad;
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor i = ops::arange(0, static_cast<double>(sz), 1, kFloat32).reshape({sz, 1});
  const Tensor j = ops::arange(0, static_cast<double>(sz), 1, kFloat32).reshape({1, sz});
  return ops::where(ops::gt(j, i), ops::full({sz, sz}, -inf, dtype), ops::zeros({sz, sz}, dtype))
      .to(device);
}

}  // namespace vitrine::nn
