#include "nn/loss.h"

namespace vitrine::nn {

Tensor mse_loss(const Tensor& input, const Tensor& target, ops::Reduction reduction) {
  VT_CHECK(input.defined() && target.defined() && input.shape() == target.shape(),
           "mse_loss: input shape {} and target shape {} differ",
           input.defined() ? input.shape() : Dims{}, target.defined() ? target.shape() : Dims{});
  Tensor d = input - target;
  Tensor sq = d * d;
  switch (reduction) {
    case ops::Reduction::None:
      return sq;
    case ops::Reduction::Sum:
      return ops::sum(sq);
    case ops::Reduction::Mean:
      return ops::mean(sq);
  }
  return sq;
}

}  // namespace vitrine::nn
