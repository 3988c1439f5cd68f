// What the attention methods of vitrine::explain (attention maps, rollout, gradient rollout,
// Chefer's relevance) read from a model: its self-attention layers in forward order, the tokens
// before the patch tokens, and the patch grid of the last forward. A transformer over image
// patches that implements this small interface, beside nn::Module, is explained by them as the
// Vision Transformer is (VisionTransformer implements it).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "nn/attention.h"

namespace vitrine::models {

class AttentionModel {
 public:
  virtual ~AttentionModel() = default;
  /// Every self-attention layer, in the order forward calls them. The methods switch their
  /// capture on (nn::MultiheadSelfAttention::capture) around a forward and read attention() and
  /// attention_grad(), each [B, H, N, N] over the N tokens of the sequence.
  virtual std::vector<nn::MultiheadSelfAttention*> attention_layers() = 0;
  /// P, the tokens before the patch tokens (a class token, register tokens). The maps are the
  /// class token's row (token 0) over the patch tokens P .. N-1, so P must be at least 1.
  virtual int64_t prefix_tokens() const = 0;
  /// The patch grid (rows, columns) of the last forward: N = P + rows * columns, patches in
  /// row-major order.
  virtual std::pair<int64_t, int64_t> last_grid() const = 0;
};

}  // namespace vitrine::models
