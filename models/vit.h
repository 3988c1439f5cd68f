// The Vision Transformer (Dosovitskiy et al.), computed exactly as timm's VisionTransformer (and
// torchvision's, Hugging Face's, DINO's and DINOv2's, which are the same network under other
// names): patch embedding by a strided convolution, class token, optional register tokens,
// learned position embedding, pre-norm encoder blocks
//     x = x + drop_path(ls1(attn(norm1(x))));  x = x + drop_path(ls2(mlp(norm2(x))))
// then the final norm, pooling (class token, or mean of the patch tokens), optional fc_norm,
// optional representation layer (pre_logits: Linear + tanh) and the head.
// Parameter names are timm's, so a timm checkpoint loads as is; vit_import.cpp maps the others.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/attention_model.h"
#include "models/vit_config.h"
#include "nn/nn.h"

namespace vitrine::models {

/// How the position embedding is resized for another input size.
enum class PosInterp {
  Size,  // timm: bicubic to the target grid
  Dino,  // DINO's interpolate_pos_encoding: bicubic with scale factor (grid + 0.1) / old grid
};

struct ViTForwardOptions {
  PosInterp pos_interp = PosInterp::Size;
  /// Crop the input to a multiple of the patch size (top-left) instead of failing.
  bool crop = false;
};

/// One encoder block (timm's Block): names norm1, attn, ls1, norm2, mlp, ls2.
class ViTBlock : public nn::Module {
 public:
  ViTBlock(const ViTConfig& c, double drop_path, Generator& gen);
  Tensor forward(const Tensor& x) override;
  /// forward(x)[:, :rows], [B, rows, dim]: norm1, keys and values over all N tokens, everything
  /// else for the first rows only (MultiheadSelfAttention::forward_first). Runs no hooks of the
  /// block or its children: call it only when first_rows_exact().
  Tensor forward_first(const Tensor& x, int64_t rows);
  /// Whether forward_first gives what forward would, rows for rows: no forward hook in the
  /// block, no attention capture, no dropout at work (its masks would be drawn over other shapes;
  /// drop-path draws one number per image either way).
  bool first_rows_exact() const;
  std::string type_name() const override { return "Block"; }
  std::shared_ptr<nn::LayerNorm> norm1, norm2;
  std::shared_ptr<nn::MultiheadSelfAttention> attn;
  std::shared_ptr<nn::MLP> mlp;
  std::shared_ptr<nn::DropPath> drop_path1, drop_path2;
  Tensor ls1, ls2;  // LayerScale gammas [dim] (registered as ls1.gamma / ls2.gamma), or undefined

 private:
  /// x[:, :rows] + drop_path1(ls1(attn(norm1(x))))[:, :rows], the residual in proj's store when
  /// nothing is between (rows = N: the whole block's first half, the module path).
  Tensor attn_half(const Tensor& x, int64_t rows);
  /// h + drop_path2(ls2(mlp(norm2(h)))), the residual in fc2's store when nothing is between.
  Tensor mlp_half(const Tensor& h);
};

class VisionTransformer : public nn::Module, public AttentionModel {
 public:
  explicit VisionTransformer(const ViTConfig& config, Generator& gen = default_generator());
  std::string type_name() const override { return "VisionTransformer"; }
  std::string extra_repr() const override;

  /// images [B, C, H, W] -> logits [B, num_classes] (or features [B, dim] without a head), with
  /// forward_options: what code that sees only an nn::Module (the Trainer, the explanation
  /// methods for any model) runs.
  Tensor forward(const Tensor& images) override;
  ViTForwardOptions forward_options;
  Tensor forward(const Tensor& images, const ViTForwardOptions& options);
  /// Tokens after the last block and the final norm: [B, prefix + patches, dim].
  Tensor forward_features(const Tensor& images, const ViTForwardOptions& options = {});
  /// With the class token's pooling, the head reads one row of the last block's output, so the
  /// last block need not compute the others (llama.cpp likewise computes its last layer for the
  /// tokens whose logits it returns). forward then runs the last block as
  /// ViTBlock::forward_first(x, 1): keys and values of every token, queries, attention, proj and
  /// MLP of the class token only. Same logits and gradients; about (1 - 2/(4 + 2 mlp_dim/dim))
  /// of the last block's products saved. Taken only when nothing could tell the difference:
  /// class_token_only() below. Set false to always compute every row.
  bool class_token_shortcut = true;
  /// Whether forward takes that shortcut now: pool "cls", the switch on, no token or attention
  /// capture, no forward hook in the last block (or on blocks, norm), no dropout at work there.
  bool class_token_only() const;
  /// In inference on the CPU, forward cuts a batch into chunks of a few images and runs them side
  /// by side on the CPU's threads, each whole on one thread (nn::forward_in_chunks): a chunk's
  /// activations stay in one core's L2 cache, where a batched forward streams every layer's
  /// output through memory. The same logits to float rounding: each image's are computed as in
  /// the whole batch, except that products of fewer rows (the class token's in the last block,
  /// the head) may go to other GEMM kernels, which sum in another order. Taken only when
  /// inference_chunks() below is over 1. For the call, every float32 Linear's weight is stored
  /// transposed once (a copy, put back at the end), so that every chunk reads it in place. Set
  /// false to run batches whole. (Like every forward, not for two threads at once on one model.)
  bool inference_in_chunks = true;
  /// How many chunks forward would cut these images into now: nn::inference_chunks for the
  /// largest activation of an image (tokens x max(3 dim, mlp_dim) floats), when
  /// inference_in_chunks is on, grad mode is off, the images are on the CPU, no module of the
  /// model is in training mode or has a forward hook, no batch norm uses batch statistics, and
  /// nothing is captured; else 1.
  int64_t inference_chunks(const Tensor& images) const;
  /// The tokens of the last n blocks, [B, prefix + patches, dim] each, first block first, each
  /// through the final norm when norm is true and the model has one: DINO's
  /// get_intermediate_layers(x, n) (which always norms; timm's with norm=True and the prefix
  /// tokens kept). intermediate_layers(x, 1).back() is forward_features(x).
  std::vector<Tensor> intermediate_layers(const Tensor& images, int64_t n = 1, bool norm = true,
                                          const ViTForwardOptions& options = {});
  /// Pooling, fc_norm, pre_logits and head applied to forward_features' output.
  Tensor forward_head(const Tensor& tokens);

  /// The position embedding for a patch grid (interpolated when it differs from the config's).
  Tensor pos_embed_for(int64_t grid_h, int64_t grid_w, PosInterp mode) const;

  // Introspection for explanation methods. With capture on, every forward keeps, per layer, the
  // attention probabilities [B, heads, N, N] and the block's output tokens [B, N, dim]; with
  // grads, the probabilities' gradients arrive there during backward.
  void capture(bool attention, bool grads = false);
  std::vector<Tensor> attentions() const;
  std::vector<Tensor> attention_grads() const;
  const std::vector<Tensor>& block_outputs() const { return block_outputs_; }
  /// The patch grid of the last forward (height, width in patches).
  std::pair<int64_t, int64_t> last_grid() const override { return last_grid_; }
  /// AttentionModel: each block's attn, and the class and register tokens.
  std::vector<nn::MultiheadSelfAttention*> attention_layers() override;
  int64_t prefix_tokens() const override { return config_.prefix_tokens(); }
  /// The last block's attention probabilities [B, heads, N, N], without running the head or the
  /// last MLP (DINO's get_last_selfattention).
  Tensor get_last_selfattention(const Tensor& images, const ViTForwardOptions& options = {});
  /// One head's output (attention-weighted values) of one layer: [B, N, head_dim].
  Tensor get_attention_output(const Tensor& images, int64_t layer, int64_t head,
                              const ViTForwardOptions& options = {});
  /// nn::summary(*this, [batch, C, H, W]): the torchinfo-style table (every module with its output
  /// shape on zeros and its own parameters; cls_token, register_tokens and pos_embed on
  /// "(Parameter)" rows; "--" for a module not called itself, as blocks (ModuleList)). The
  /// training flags, hooks, attention captures, block outputs and last_grid() are left as they
  /// were.
  std::string summary_table(int64_t batch = 1);

  /// Replaces the head for another number of classes (transfer learning), freshly initialised.
  void reset_head(int64_t num_classes, Generator& gen = default_generator());

  const ViTConfig& config() const { return config_; }

  std::shared_ptr<nn::Conv2d> patch_embed;  // registered as patch_embed.proj
  std::shared_ptr<nn::Sequential> stem;     // patch_embed.stem (Conv2d, BatchNorm2d, ReLU, ...)
  Tensor cls_token;                         // [1, 1, dim]
  Tensor register_tokens;                   // [1, registers, dim] or undefined
  Tensor pos_embed;                         // [1, pos_tokens, dim]
  std::shared_ptr<nn::Dropout> pos_drop;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::LayerNorm> norm;     // null with fc_norm (timm's Identity) or !final_norm
  std::shared_ptr<nn::LayerNorm> fc_norm;  // only with fc_norm
  std::shared_ptr<nn::Linear> pre_logits;  // registered as pre_logits.fc; only with representation
  std::shared_ptr<nn::Linear> head;        // only with num_classes > 0
  /// The tokens the first block sees: patch embedding, prefix tokens and position embedding
  /// (then embedding dropout), [B, prefix + patches, dim].
  Tensor embed(const Tensor& images, const ViTForwardOptions& options = {});

 private:
  /// Every weight drawn again as torchvision's VisionTransformer.__init__ draws it
  /// (ViTConfig::init "torchvision").
  void init_torchvision(Generator& gen);
  /// Every weight drawn again as lucidrains' vit-pytorch leaves it: PyTorch's defaults, the
  /// class token and position embedding randn (ViTConfig::init "vit-pytorch").
  void init_vit_pytorch(Generator& gen);
  /// embed, the blocks (the last one for its first last_rows rows only when last_rows > 0) and
  /// the final norm. record: keep the block outputs (when capturing) and last_grid(); off for
  /// the chunks of forward_in_chunks, which run on several threads at once.
  Tensor tokens(const Tensor& images, const ViTForwardOptions& options, int64_t last_rows,
                bool record = true);
  /// embed, with record as in tokens.
  Tensor embed_tokens(const Tensor& images, const ViTForwardOptions& options, bool record);
  ViTConfig config_;
  std::vector<Tensor> block_outputs_;
  bool capture_tokens_ = false;
  std::pair<int64_t, int64_t> last_grid_{0, 0};
};

// ---- foreign weights (vit_import.cpp) --------------------------------------------------------

/// The naming schemes the loader recognises.
enum class ViTNaming { Vitrine, Timm, Torchvision, HuggingFace, Dinov2 };
std::string naming_name(ViTNaming n);

/// Which naming a state dict uses, from its tensor names; throws Error naming an unrecognised
/// key when none fits.
ViTNaming detect_naming(const nn::NamedTensors& state);

/// Maps a foreign state dict to Vitrine's (timm) names: splits Hugging Face's query/key/value into
/// qkv, drops the keys listed in docs/vit.md (mask_token, HF pooler when unused, ...). The result
/// still has to fit the config (load_vit checks).
nn::NamedTensors to_vitrine_names(const nn::NamedTensors& state, ViTNaming naming);

/// A config from a Hugging Face config.json (ViTConfig fields of transformers).
ViTConfig config_from_hf(const nlohmann::json& hf);

/// What a --model-config argument names: a preset ("vit_base_patch16_224", "fmnist"), or a JSON
/// file holding our config, a Hugging Face config.json (recognised by its "model_type" /
/// "hidden_size" keys) or a vitrine-train config (configs/*.json: its "model" section). Our
/// config may start from a preset: {"preset": "fmnist", "depth": 3} is the preset with depth 3.
/// Errors name the argument and what was tried.
ViTConfig resolve_config(const std::string& spec);

/// Reads a safetensors checkpoint in any supported naming into a model built from its metadata
/// ("vitrine.config"), or from the given config when the file has none; then the number of
/// classes is the file's head's (its rows; 0 without a head, as DINO's backbones), whatever the
/// given config says, so a preset loads a head-less or fine-tuned file of its architecture. The
/// first tensor whose shape does not fit is named in the error together with the expected shape.
std::shared_ptr<VisionTransformer> load_vit(const std::string& path,
                                            const std::optional<ViTConfig>& config = std::nullopt);

/// Saves in timm naming (what timm's / DINO's create_model loads), with the config in metadata.
void save_vit_timm(const std::string& path, const VisionTransformer& model,
                   const nn::Metadata& extra = {});

}  // namespace vitrine::models
