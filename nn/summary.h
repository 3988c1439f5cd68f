// A torchinfo-style table of any module (torchinfo.summary(model, input_size, depth=inf)): one
// forward on zeros with a forward hook on every module, then a row per module with its output
// shape and the parameters it owns.
#pragma once
#include <string>

#include "autograd/tensor.h"
#include "nn/module.h"

namespace vitrine::nn {

/// Every module of m, pre-order and indented by depth, named by its full name and type
/// ("blocks.0.attn.qkv (Linear)"), with the output shape of one forward of m on zeros of
/// input_shape (as [batch, C, H, W]; the dtype and device of m's first parameter, float32 on the
/// CPU without one), run in eval mode without gradients and recorded by forward hooks ("--" for a
/// module not called itself through operator(), as a ModuleList), and its Param #.
/// Param # is what the row's module owns itself, torchinfo's convention at full depth: a leaf's
/// parameters, while a module with children shows "--" and each tensor it owns directly gets a
/// "(Parameter)" row with the tensor's shape (a ViT's cls_token and pos_embed), so the rows add
/// up to num_parameters() (a tensor shared by two modules counts on its first row only). Then
/// total, trainable and non-trainable parameters and sizes in MB (input, the leaf modules'
/// outputs, parameters). The training flags are restored and the hooks removed, whatever
/// happens; state a forward leaves in m itself (a ViT's captures) is the caller's to keep.
std::string summary(Module& m, const Dims& input_shape);

}  // namespace vitrine::nn
