// The tiny ViT the explanation tests run on: 4-pixel patches, width 8, 2 blocks of 2 heads,
// 3 classes; image size and channels per test.
#pragma once
#include "models/vit.h"

namespace vt_test {

inline vitrine::models::ViTConfig tiny_vit_config(int64_t height, int64_t width, int64_t channels) {
  vitrine::models::ViTConfig c;
  c.image_h = height;
  c.image_w = width;
  c.patch = 4;
  c.channels = channels;
  c.num_classes = 3;
  c.dim = 8;
  c.depth = 2;
  c.heads = 2;
  c.mlp_dim = 16;
  return c;
}

/// The command-line tests' model: 28 x 28 grey, 7-pixel patches (a 4 x 4 grid), width 16, 2 blocks
/// of 2 heads, 3 classes.
inline vitrine::models::ViTConfig cli_vit_config() {
  vitrine::models::ViTConfig c = tiny_vit_config(28, 28, 1);
  c.patch = 7;
  c.dim = 16;
  c.mlp_dim = 32;
  return c;
}

}  // namespace vt_test
