// ViTConfig: the Vision Transformer's hyperparameters (timm's names where timm has them), their
// JSON form and the presets (timm's vit_{tiny,small,base,large}_patch{8,16,32}_224, ours). The
// model built from it is vit.h's VisionTransformer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vitrine::models {

struct ViTConfig {
  int64_t image_h = 224, image_w = 224;
  int64_t patch = 16;
  /// The patch embedding's kernel size; 0 means patch (timm's non-overlapping patches). A larger
  /// kernel k overlaps neighbouring patches: the convolution keeps stride patch and pads by
  /// (k - patch) / 2 on each side, so the grid is still image / patch.
  int64_t patch_kernel = 0;
  /// A convolutional stem before the patch projection (Xiao et al. 2021, "Early Convolutions Help
  /// Transformers See Better"), one stage per width c_i: Conv2d(3x3, padding 1, no bias),
  /// BatchNorm2d, ReLU, with stride 2 while the part of the patch size not yet covered is even,
  /// else 1. The projection then has kernel = stride = patch / stem_stride() (1x1 when the stem's
  /// strides make up the patch). Empty: timm's patchify embedding. Not with patch_kernel.
  std::vector<int64_t> stem;
  int64_t channels = 3;
  int64_t num_classes = 1000;  // 0: no head (a feature extractor, as DINO)
  int64_t dim = 768;
  int64_t depth = 12;
  int64_t heads = 12;
  /// The attention's width per head; 0: dim / heads (timm). Another value gives the inner width
  /// heads * dim_head of lucidrains' vit-pytorch (qkv: dim -> 3 heads dim_head, proj back to dim).
  int64_t dim_head = 0;
  int64_t mlp_dim = 3072;
  double dropout = 0;          // after the MLP's activations and projections (timm proj_drop)
  double attn_dropout = 0;     // on the attention probabilities
  double embed_dropout = 0;    // after adding the position embedding (timm pos_drop)
  double drop_path = 0;        // stochastic depth, linearly increasing over the blocks
  std::string pool = "cls";    // "cls" or "mean"
  int64_t representation = 0;  // pre_logits size (torchvision's representation_size), 0: none
  bool qkv_bias = true;
  double eps = 1e-6;         // LayerNorm eps (timm 1e-6, torchvision 1e-6, Hugging Face 1e-12)
  int64_t registers = 0;     // register tokens (DINOv2 with registers)
  bool layer_scale = false;  // DINOv2's ls1/ls2 gamma
  double layer_scale_init = 1e-5;
  bool no_embed_class = false;  // timm: pos_embed covers the patches only
  bool fc_norm = false;         // timm: mean pooling over the patch tokens, then a norm
  /// The LayerNorm after the last block (timm's norm). false: none, the layout of vit-pytorch
  /// models whose head is a Linear alone (the CIFAR recipe's: docs/vit.md).
  bool final_norm = true;
  /// The initial weights' scheme (the values a checkpoint loads over them do not depend on it):
  ///   "timm"         timm's VisionTransformer: Linear weights trunc_normal(std 0.02), biases 0,
  ///                  pos_embed trunc_normal(std 0.02), cls_token normal(std 1e-6), the patch
  ///                  embedding PyTorch's Conv2d default
  ///   "torchvision"  torchvision's VisionTransformer.__init__: the patch embedding
  ///                  trunc_normal(std sqrt(1 / fan_in)) with a zero bias, cls_token 0,
  ///                  pos_embed normal(std 0.02), qkv xavier_uniform over [3 inner, dim] with a
  ///                  zero bias (nn.MultiheadAttention's in_proj), proj kaiming_uniform(a = sqrt 5)
  ///                  with a zero bias (its out_proj), the MLP's xavier_uniform weights and
  ///                  normal(std 1e-6) biases, pre_logits trunc_normal(std sqrt(1 / fan_in)), a
  ///                  zero head
  ///   "vit-pytorch"  lucidrains' vit-pytorch, which sets nothing itself: every Linear and the
  ///                  patch projection PyTorch's default (weights kaiming_uniform(a = sqrt 5),
  ///                  biases uniform(+-1 / sqrt(fan_in))), cls_token and pos_embed randn (std 1)
  ///   "dino"         DINO's vision_transformer.py: timm's, except cls_token
  ///                  trunc_normal(std 0.02) (its _init_weights: Linear trunc_normal(std 0.02),
  ///                  biases 0; the patch embedding PyTorch's Conv2d default)
  std::string init = "timm";

  /// Per head and in all: dim_head (or dim / heads) and heads times it.
  int64_t head_dim() const { return dim_head > 0 ? dim_head : dim / heads; }
  int64_t inner_dim() const { return heads * head_dim(); }

  /// Each stem stage's stride (2 while the patch size left is even, else 1), and their product.
  std::vector<int64_t> stem_strides() const;
  int64_t stem_stride() const;
  /// The patch projection's kernel (and stride: stride() below).
  int64_t kernel() const { return patch_kernel > 0 ? patch_kernel : patch / stem_stride(); }
  int64_t stride() const { return patch / stem_stride(); }
  int64_t kernel_padding() const { return (kernel() - stride()) / 2; }
  /// The patch projection's input channels: the image's, or the stem's last width.
  int64_t proj_channels() const { return stem.empty() ? channels : stem.back(); }
  int64_t grid_h() const { return image_h / patch; }
  int64_t grid_w() const { return image_w / patch; }
  int64_t num_patches() const { return grid_h() * grid_w(); }
  /// Tokens before the patches: class token and registers.
  int64_t prefix_tokens() const { return 1 + registers; }
  /// Rows of pos_embed: the patches, plus the class token unless no_embed_class.
  int64_t pos_tokens() const { return num_patches() + (no_embed_class ? 0 : 1); }

  /// Throws Error naming the first inconsistent field.
  void validate() const;
  /// A lower bound on the weights this config's model has, computed without building it:
  ///   depth * (4 dim inner_dim + 2 dim mlp_dim)   (qkv, proj, fc1 and fc2 of every block)
  int64_t min_parameters() const { return depth * (4 * dim * inner_dim() + 2 * dim * mlp_dim); }
  nlohmann::json to_json() const;
  /// Reads our own JSON (unknown keys are errors; missing keys keep defaults); "image_size" may
  /// be one number or [h, w].
  static ViTConfig from_json(const nlohmann::json& j);
  /// timm's names (vit_{tiny,small,base,large}_patch{8,16,32}_224) and ours (fmnist, cifar10).
  static ViTConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
};

}  // namespace vitrine::models
