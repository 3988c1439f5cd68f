// The Transformer of "Attention Is All You Need" as torch.nn (PyTorch 1.13's math, without its
// inference fast paths): TransformerEncoderLayer, TransformerDecoderLayer, the stacks
// TransformerEncoder and TransformerDecoder (layers.0, layers.1, ...: copies of a given layer, as
// PyTorch's deepcopy clones), and Transformer (encoder, decoder, each with a final norm). The
// submodules have PyTorch's names (self_attn, multihead_attn, linear1, dropout, linear2, norm1..3,
// dropout1..3), so a PyTorch state_dict loads by name.
// Shapes: [S, N, E] sequence first, or [N, S, E] with batch_first; [S, E] unbatched. Masks as
// MultiheadAttention's: bool true = may NOT attend, float = added to the scores.
#pragma once
#include <string>

#include "nn/containers.h"
#include "nn/multihead_attention.h"

namespace vitrine::nn {

/// Post-norm (norm_first false):  x = norm1(x + sa(x)),  x = norm2(x + ff(x))
/// Pre-norm (norm_first true):    x = x + sa(norm1(x)),  x = x + ff(norm2(x))
///   sa(x) = dropout1(self_attn(x, x, x, masks)),
///   ff(x) = dropout2(linear2(dropout(activation(linear1(x)))))
class TransformerEncoderLayer : public Module {
 public:
  /// activation: "relu" or "gelu" (exact). dropout: every dropout's p, the attention's too.
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward = 2048,
                          double dropout = 0.1, const std::string& activation = "relu",
                          double layer_norm_eps = 1e-5, bool batch_first = false,
                          bool norm_first = false, Generator& gen = default_generator());
  /// src [S, N, E] ([N, S, E] batch_first, [S, E] unbatched); src_mask [S, S] or [N nhead, S, S];
  /// src_key_padding_mask [N, S].
  Tensor forward(const Tensor& src, const Tensor& src_mask,
                 const Tensor& src_key_padding_mask = Tensor());
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  std::string type_name() const override { return "TransformerEncoderLayer"; }
  std::string extra_repr() const override;
  /// A deep copy (PyTorch's copy.deepcopy): the same hyperparameters, generator, mode and
  /// parameter values, in tensors of its own. Draws nothing from the generator.
  std::shared_ptr<TransformerEncoderLayer> clone() const;

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  int64_t d_model, nhead, dim_feedforward;
  std::string activation;
  double layer_norm_eps;
  bool batch_first, norm_first;

 private:
  Tensor ff_block(const Tensor& x);
};

/// Post-norm: x = norm1(x + sa(x)), x = norm2(x + mha(x, memory)), x = norm3(x + ff(x));
/// pre-norm:  x = x + sa(norm1(x)), x = x + mha(norm2(x), memory), x = x + ff(norm3(x)),
///   sa = dropout1(self_attn(x, x, x)), mha = dropout2(multihead_attn(x, memory, memory)),
///   ff = dropout3(linear2(dropout(activation(linear1(x)))))
class TransformerDecoderLayer : public Module {
 public:
  using Module::forward;  // forward(x) of one tensor: not meaningful here, an error
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward = 2048,
                          double dropout = 0.1, const std::string& activation = "relu",
                          double layer_norm_eps = 1e-5, bool batch_first = false,
                          bool norm_first = false, Generator& gen = default_generator());
  /// tgt [T, N, E], memory [S, N, E] (batch_first: [N, T, E], [N, S, E]); tgt_mask [T, T],
  /// memory_mask [T, S] (or [N nhead, ...]); tgt_key_padding_mask [N, T],
  /// memory_key_padding_mask [N, S].
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(),
                 const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());
  std::string type_name() const override { return "TransformerDecoderLayer"; }
  std::string extra_repr() const override;
  /// A deep copy, as TransformerEncoderLayer::clone.
  std::shared_ptr<TransformerDecoderLayer> clone() const;

  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  int64_t d_model, nhead, dim_feedforward;
  std::string activation;
  double layer_norm_eps;
  bool batch_first, norm_first;

 private:
  Tensor ff_block(const Tensor& x);
};

/// num_layers copies of encoder_layer applied in turn, then norm (when given):
///   x = norm(layers[n-1](... layers[0](src, mask, src_key_padding_mask) ...))
class TransformerEncoder : public Module {
 public:
  /// The layers are clones of encoder_layer (which is not itself kept), as PyTorch's.
  TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);
  Tensor forward(const Tensor& src, const Tensor& mask,
                 const Tensor& src_key_padding_mask = Tensor());
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  std::string type_name() const override { return "TransformerEncoder"; }
  std::string extra_repr() const override;
  /// The i-th layer.
  std::shared_ptr<TransformerEncoderLayer> layer(size_t i) const;

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null when not given
  int64_t num_layers;
};

/// num_layers copies of decoder_layer applied in turn on (x, memory), then norm (when given).
class TransformerDecoder : public Module {
 public:
  using Module::forward;  // forward(x) of one tensor: not meaningful here, an error
  TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(),
                 const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());
  std::string type_name() const override { return "TransformerDecoder"; }
  std::string extra_repr() const override;
  std::shared_ptr<TransformerDecoderLayer> layer(size_t i) const;

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null when not given
  int64_t num_layers;
};

/// memory = encoder(src, src_mask, src_key_padding_mask)
/// out = decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
///               memory_key_padding_mask)
/// encoder and decoder end with a LayerNorm(d_model, layer_norm_eps) each. After construction
/// every parameter of more than one dimension is reset by xavier_uniform_ (PyTorch's
/// _reset_parameters), drawn from gen.
class Transformer : public Module {
 public:
  using Module::forward;  // forward(x) of one tensor: not meaningful here, an error
  Transformer(int64_t d_model = 512, int64_t nhead = 8, int64_t num_encoder_layers = 6,
              int64_t num_decoder_layers = 6, int64_t dim_feedforward = 2048, double dropout = 0.1,
              const std::string& activation = "relu", double layer_norm_eps = 1e-5,
              bool batch_first = false, bool norm_first = false,
              Generator& gen = default_generator());
  /// src [S, N, E], tgt [T, N, E] ([N, S, E], [N, T, E] batch_first; [S, E], [T, E] unbatched)
  /// -> [T, N, E]. src_mask [S, S], tgt_mask [T, T], memory_mask [T, S];
  /// *_key_padding_mask [N, S], [N, T], [N, S].
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = Tensor(),
                 const Tensor& tgt_mask = Tensor(), const Tensor& memory_mask = Tensor(),
                 const Tensor& src_key_padding_mask = Tensor(),
                 const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());
  std::string type_name() const override { return "Transformer"; }
  std::string extra_repr() const override;

  /// [sz, sz]: 0 on and below the diagonal, -inf above (a decoder's causal tgt_mask), as
  /// PyTorch's; float32 unless dtype says otherwise (a float mask has the model's dtype).
  static Tensor generate_square_subsequent_mask(int64_t sz, DType dtype = kFloat32,
                                                Device device = kCPU);

  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
  int64_t d_model, nhead;
  bool batch_first;
};

}  // namespace vitrine::nn
