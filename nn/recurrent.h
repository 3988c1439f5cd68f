// Recurrent layers as torch.nn's: RNN (tanh or relu), LSTM and GRU over whole sequences
// (num_layers, bias, batch_first, dropout between layers, bidirectional) and their one-step
// cells RNNCell, LSTMCell and GRUCell. Parameter names, shapes, gate order (LSTM i, f, g, o; GRU
// r, z, n) and initialisation (every parameter U(-1/sqrt(H), 1/sqrt(H))) are PyTorch's, so a
// state_dict converts by name. Each direction of each layer runs as one op
// (ops::rnn_sequence, ops/recurrent.h): the input's product for all time steps at once, then
// one product and one fused pass of the gates per step, and a backward through time without a
// node per gate. docs/nn.md: "Recurrent layers".
#pragma once
#include <string>
#include <vector>

#include "nn/module.h"
#include "ops/recurrent.h"

namespace vitrine::nn {

/// A recurrent layer's state: h [L D, B, H] (unbatched: [L D, H]) and, for an LSTM, c likewise
/// (L layers, D = 2 when bidirectional). Undefined tensors mean zeros.
struct RnnState {
  Tensor h, c;
};

/// What RNN/LSTM/GRU::forward returns: output [T, B, D H] (batch_first: [B, T, D H]; unbatched:
/// [T, D H]), the last hidden state of every layer and direction (and LSTM's cell state).
struct RnnOutput {
  Tensor output;
  RnnState state;
};

/// The options every recurrent layer takes, as torch::nn::LSTMOptions (chained setters):
/// LSTM(RnnOptions(10, 20).num_layers(2).batch_first(true)).
class RnnOptions {
 public:
  RnnOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  RnnOptions& num_layers(int64_t n) { return num_layers_ = n, *this; }
  /// RNN only: "tanh" or "relu"
  RnnOptions& nonlinearity(std::string s) { return nonlinearity_ = std::move(s), *this; }
  RnnOptions& bias(bool b) { return bias_ = b, *this; }
  RnnOptions& batch_first(bool b) { return batch_first_ = b, *this; }
  RnnOptions& dropout(double p) { return dropout_ = p, *this; }
  RnnOptions& bidirectional(bool b) { return bidirectional_ = b, *this; }
  int64_t input_size_, hidden_size_, num_layers_ = 1;
  std::string nonlinearity_ = "tanh";
  bool bias_ = true, batch_first_ = false;
  double dropout_ = 0;
  bool bidirectional_ = false;
};

/// The shared body of RNN, LSTM and GRU. Per layer k and direction (suffix "" or "_reverse"):
///   weight_ih_l{k} [G H, in_k], weight_hh_l{k} [G H, H], bias_ih_l{k}, bias_hh_l{k} [G H]
/// with G = 1 (RNN), 4 (LSTM), 3 (GRU), in_0 = input_size and in_k = D H after; layer k + 1
/// reads layer k's output (both directions side by side), dropped out in training when
/// dropout > 0.
class RNNBase : public Module {
 public:
  RNNBase(ops::RnnMode mode, const RnnOptions& options, Generator& gen);
  /// input [T, B, in] (batch_first: [B, T, in]; unbatched: [T, in]); state: the initial state
  /// (undefined: zeros).
  RnnOutput forward(const Tensor& input, const RnnState& state);
  /// forward(input, {}).output, so that the layer can sit in a Sequential.
  Tensor forward(const Tensor& input) override { return forward(input, RnnState{}).output; }
  std::string extra_repr() const override;
  /// Every layer's parameters, [layer][direction] = {w_ih, w_hh, b_ih, b_hh} (biases undefined
  /// when bias is false), in the order PyTorch's _flat_weights lists them.
  std::vector<std::vector<std::vector<Tensor>>> all_weights;
  ops::RnnMode mode;
  RnnOptions options;
  /// The generator of the dropout between layers.
  void set_generator(Generator& gen) { gen_ = &gen; }

 private:
  Generator* gen_;
};

/// torch.nn.RNN: h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh), act tanh or relu.
class RNN : public RNNBase {
 public:
  explicit RNN(const RnnOptions& options, Generator& gen = default_generator());
  RNN(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1,
      const std::string& nonlinearity = "tanh", bool bias = true, bool batch_first = false,
      double dropout = 0, bool bidirectional = false, Generator& gen = default_generator());
  using RNNBase::forward;
  std::string type_name() const override { return "RNN"; }
};

/// torch.nn.LSTM: i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of the four quarters of
/// x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh;  c_t = f c_{t-1} + i g,  h_t = o tanh(c_t).
class LSTM : public RNNBase {
 public:
  explicit LSTM(const RnnOptions& options, Generator& gen = default_generator());
  LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true,
       bool batch_first = false, double dropout = 0, bool bidirectional = false,
       Generator& gen = default_generator());
  using RNNBase::forward;
  std::string type_name() const override { return "LSTM"; }
};

/// torch.nn.GRU: r = sigmoid(x W_ir^T + b_ir + h W_hr^T + b_hr), z likewise,
/// n = tanh(x W_in^T + b_in + r (h W_hn^T + b_hn)),  h_t = (1 - z) n + z h_{t-1}.
class GRU : public RNNBase {
 public:
  explicit GRU(const RnnOptions& options, Generator& gen = default_generator());
  GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true,
      bool batch_first = false, double dropout = 0, bool bidirectional = false,
      Generator& gen = default_generator());
  using RNNBase::forward;
  std::string type_name() const override { return "GRU"; }
};

/// The cells' shared body: weight_ih [G H, in], weight_hh [G H, H], bias_ih, bias_hh [G H].
class RNNCellBase : public Module {
 public:
  RNNCellBase(ops::RnnMode mode, int64_t input_size, int64_t hidden_size, bool bias,
              Generator& gen);
  std::string extra_repr() const override;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
  int64_t input_size, hidden_size;
  ops::RnnMode mode;

 protected:
  /// One step: input [B, in] or [in], state h (and c) [B, H] or [H] (undefined: zeros).
  RnnState step(const Tensor& input, const RnnState& state);
};

/// torch.nn.RNNCell: h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)
class RNNCell : public RNNCellBase {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true,
          const std::string& nonlinearity = "tanh", Generator& gen = default_generator());
  /// h' from input [B, in] (or [in]) and h [B, H] (undefined: zeros)
  Tensor forward(const Tensor& input, const Tensor& h);
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  std::string type_name() const override { return "RNNCell"; }
};

/// torch.nn.LSTMCell: one LSTM step, returning (h', c')
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true,
           Generator& gen = default_generator());
  RnnState forward(const Tensor& input, const RnnState& state);
  /// h' from zero state
  Tensor forward(const Tensor& input) override { return forward(input, RnnState{}).h; }
  std::string type_name() const override { return "LSTMCell"; }
};

/// torch.nn.GRUCell: one GRU step
class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true,
          Generator& gen = default_generator());
  Tensor forward(const Tensor& input, const Tensor& h);
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  std::string type_name() const override { return "GRUCell"; }
};

}  // namespace vitrine::nn
