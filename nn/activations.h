// Activation modules and their functional forms, as torch.nn's (PyTorch 1.13's names, defaults
// and gradients): LeakyReLU, ELU, PReLU, ReLU6, Hardswish, Hardsigmoid, Mish, Softplus, Softmax,
// LogSoftmax. (ReLU, GELU, Tanh, Sigmoid and SiLU are in nn/layers.h.) Each is composed of ops,
// so autograd gives the gradient; at a kink the gradient is PyTorch's, which is stated on each.
#pragma once
#include <cstdint>

#include "nn/module.h"

namespace vitrine::nn {

/// y = x for x > 0, negative_slope x otherwise   (gradient negative_slope at 0)
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
/// y = x for x > 0, alpha (e^x - 1) otherwise   (gradient alpha at 0)
Tensor elu(const Tensor& x, double alpha = 1);
/// y = x for x > 0, w_c x otherwise, w_c = weight[c] for x's channel c (dim 1; x [N, C, ...],
/// weight [C] or [1]; inputs of fewer than 2 dims have one channel). Gradient w_c at 0.
Tensor prelu(const Tensor& x, const Tensor& weight);
/// y = min(max(x, 0), 6)   (gradient 1 strictly inside (0, 6), 0 at 0 and 6)
Tensor relu6(const Tensor& x);
/// y = x min(max(x + 3, 0), 6) / 6   (gradient 0 below -3, x / 3 + 1/2 on [-3, 3), 1 from 3 on:
/// PyTorch's vectorised kernel; its scalar loop, which runs on a tensor's last few elements, gives
/// 1.5 at 3 itself)
Tensor hardswish(const Tensor& x);
/// y = min(max(x + 3, 0), 6) / 6   (gradient 1/6 strictly inside (-3, 3), else 0; as PyTorch, the
/// 1/6 is the float constant 1.0f / 6.0f in every dtype)
Tensor hardsigmoid(const Tensor& x);
/// y = x tanh(softplus(x))
Tensor mish(const Tensor& x);
/// y = log(1 + e^(beta x)) / beta, and x where beta x > threshold   (gradient sigmoid(beta x),
/// 1 above the threshold)
Tensor softplus(const Tensor& x, double beta = 1, double threshold = 20);

/// nn.LeakyReLU(negative_slope = 0.01)
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  double negative_slope;
};

/// nn.ELU(alpha = 1)
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1) : alpha(alpha) {}
  Tensor forward(const Tensor& x) override { return elu(x, alpha); }
  std::string type_name() const override { return "ELU"; }
  std::string extra_repr() const override;
  double alpha;
};

/// nn.PReLU(num_parameters = 1, init = 0.25): a learnt slope per channel (or one for all),
/// parameter "weight" [num_parameters] filled with init.
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override { return prelu(x, weight); }
  std::string type_name() const override { return "PReLU"; }
  std::string extra_repr() const override;
  Tensor weight;  // [num_parameters]
  int64_t num_parameters;
};

/// nn.ReLU6
class ReLU6 : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu6(x); }
  std::string type_name() const override { return "ReLU6"; }
};

/// nn.Hardswish
class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return hardswish(x); }
  std::string type_name() const override { return "Hardswish"; }
};

/// nn.Hardsigmoid
class Hardsigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return hardsigmoid(x); }
  std::string type_name() const override { return "Hardsigmoid"; }
};

/// nn.Mish
class Mish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return mish(x); }
  std::string type_name() const override { return "Mish"; }
};

/// nn.Softplus(beta = 1, threshold = 20)
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1, double threshold = 20) : beta(beta), threshold(threshold) {}
  Tensor forward(const Tensor& x) override { return softplus(x, beta, threshold); }
  std::string type_name() const override { return "Softplus"; }
  std::string extra_repr() const override;
  double beta, threshold;
};

/// nn.Softmax(dim): y_i = e^(x_i) / sum_j e^(x_j) along dim (the dim is required, as in the
/// PyTorch C++ API; Python's implicit dim is deprecated)
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Softmax"; }
  std::string extra_repr() const override;
  int64_t dim;
};

/// nn.LogSoftmax(dim): y_i = x_i - log sum_j e^(x_j) along dim
class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override;
  int64_t dim;
};

}  // namespace vitrine::nn
