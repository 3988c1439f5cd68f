#include "nn/recurrent.h"

#include <cmath>

#include "nn/init.h"
#include "ops/ops.h"

namespace vitrine::nn {

namespace {

const char* mode_name(ops::RnnMode mode) {
  switch (mode) {
    case ops::RnnMode::Lstm:
      return "LSTM";
    case ops::RnnMode::Gru:
      return "GRU";
    default:
      return "RNN";
  }
}

ops::RnnMode rnn_mode(const std::string& nonlinearity, const char* who) {
  VT_CHECK(nonlinearity == "tanh" || nonlinearity == "relu",
           "{}: unknown nonlinearity '{}' (expected 'tanh' or 'relu')", who, nonlinearity);
  return nonlinearity == "tanh" ? ops::RnnMode::Tanh : ops::RnnMode::Relu;
}

/// A state tensor of a layer: given (checked against shape, with a batch dim added when the input
/// is unbatched) or zeros.
Tensor state_or_zeros(const Tensor& t, const Dims& batched_shape, bool batched, const Tensor& x,
                      const char* who, const char* what) {
  if (!t.defined()) return ops::zeros(batched_shape, x.dtype(), x.device());
  Dims want = batched_shape;
  if (!batched)
    want = batched_shape.size() == 3 ? Dims{batched_shape[0], batched_shape[2]}
                                     : Dims{batched_shape[1]};
  VT_CHECK(t.shape() == want, "{}: expected {} of shape {}, got {}", who, what, want, t.shape());
  return batched ? t : ops::unsqueeze(t, batched_shape.size() == 3 ? 1 : 0);
}

/// The options of the layers' positional constructors (torch.nn's argument order).
RnnOptions positional_options(int64_t input_size, int64_t hidden_size, int64_t num_layers,
                              const std::string& nonlinearity, bool bias, bool batch_first,
                              double dropout, bool bidirectional) {
  return RnnOptions(input_size, hidden_size)
      .num_layers(num_layers)
      .nonlinearity(nonlinearity)
      .bias(bias)
      .batch_first(batch_first)
      .dropout(dropout)
      .bidirectional(bidirectional);
}

}  // namespace

// ---- RNN, LSTM, GRU ----------------------------------------------------------------------------

RNNBase::RNNBase(ops::RnnMode m, const RnnOptions& o, Generator& gen)
    : mode(m), options(o), gen_(&gen) {
  const char* who = mode_name(m);
  VT_CHECK(o.input_size_ > 0 && o.hidden_size_ > 0,
           "{}: input_size and hidden_size must be positive, got {} and {}", who, o.input_size_,
           o.hidden_size_);
  VT_CHECK(o.num_layers_ >= 1, "{}: num_layers must be at least 1, got {}", who, o.num_layers_);
  VT_CHECK(o.dropout_ >= 0 && o.dropout_ <= 1,
           "{}: dropout must be a probability in [0, 1], got {}", who, o.dropout_);
  const int64_t G = ops::rnn_gates(m), H = o.hidden_size_, D = o.bidirectional_ ? 2 : 1;
  const double bound = 1.0 / std::sqrt(static_cast<double>(H));
  for (int64_t l = 0; l < o.num_layers_; ++l) {
    all_weights.emplace_back();
    for (int64_t d = 0; d < D; ++d) {
      const std::string sfx = fmt::format("l{}{}", l, d == 1 ? "_reverse" : "");
      const int64_t in = l == 0 ? o.input_size_ : D * H;
      std::vector<Tensor> w(4);
      w[0] = register_parameter("weight_ih_" + sfx, ops::empty({G * H, in}));
      w[1] = register_parameter("weight_hh_" + sfx, ops::empty({G * H, H}));
      if (o.bias_) {
        w[2] = register_parameter("bias_ih_" + sfx, ops::empty({G * H}));
        w[3] = register_parameter("bias_hh_" + sfx, ops::empty({G * H}));
      }
      for (const Tensor& t : w)
        if (t.defined()) init::uniform_(t, -bound, bound, gen);
      all_weights.back().push_back(std::move(w));
    }
  }
}

RnnOutput RNNBase::forward(const Tensor& input, const RnnState& state) {
  const char* who = mode_name(mode);
  const RnnOptions& o = options;
  VT_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3),
           "{}: expected input of shape [T, B, {}]{} or unbatched [T, {}], got {}", who,
           o.input_size_, o.batch_first_ ? " (batch_first: [B, T, in])" : "", o.input_size_,
           input.defined() ? input.shape() : Dims{});
  VT_CHECK(input.size(-1) == o.input_size_, "{}: input has {} features, expected input_size {}",
           who, input.size(-1), o.input_size_);
  const bool batched = input.dim() == 3, lstm = mode == ops::RnnMode::Lstm;
  Tensor x = !batched ? ops::unsqueeze(input, 1)
                      : (o.batch_first_ ? ops::transpose(input, 0, 1) : input);  // [T, B, in]
  const int64_t B = x.size(1), H = o.hidden_size_, D = o.bidirectional_ ? 2 : 1;
  const int64_t L = o.num_layers_;
  VT_CHECK(lstm || !state.c.defined(), "{}: a cell state c is given, but only an LSTM has one",
           who);
  const Tensor h0 = state_or_zeros(state.h, {L * D, B, H}, batched, x, who, "hidden state h");
  const Tensor c0 =
      lstm ? state_or_zeros(state.c, {L * D, B, H}, batched, x, who, "cell state c") : Tensor();
  std::vector<Tensor> hs, cs;
  Tensor layer_in = x;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < D; ++d) {
      const std::vector<Tensor>& w = all_weights[l][d];
      const Tensor xp = ops::linear(layer_in, w[0], w[2]);  // [T, B, G H], every step at once
      const int64_t k = l * D + d;
      ops::RnnSequence r = ops::rnn_sequence(mode, xp, w[1], w[3], h0.select(0, k),
                                             lstm ? c0.select(0, k) : Tensor(), d == 1);
      outs.push_back(r.output);
      hs.push_back(r.h_n);
      if (lstm) cs.push_back(r.c_n);
    }
    layer_in = D == 2 ? ops::cat(outs, 2) : outs[0];
    if (l + 1 < L && o.dropout_ > 0 && is_training())
      layer_in = ops::dropout(layer_in, o.dropout_, true, *gen_);
  }
  RnnOutput out{layer_in, {ops::stack(hs, 0), lstm ? ops::stack(cs, 0) : Tensor()}};
  if (!batched) {
    out.output = ops::squeeze(out.output, 1);
    out.state.h = ops::squeeze(out.state.h, 1);
    if (lstm) out.state.c = ops::squeeze(out.state.c, 1);
  } else if (o.batch_first_) {
    out.output = ops::transpose(out.output, 0, 1);
  }
  return out;
}

std::string RNNBase::extra_repr() const {
  const RnnOptions& o = options;
  std::string s = fmt::format("{}, {}", o.input_size_, o.hidden_size_);
  if (o.num_layers_ != 1) s += fmt::format(", num_layers={}", o.num_layers_);
  if (mode == ops::RnnMode::Relu) s += ", nonlinearity=relu";
  if (!o.bias_) s += ", bias=False";
  if (o.batch_first_) s += ", batch_first=True";
  if (o.dropout_ != 0) s += fmt::format(", dropout={}", o.dropout_);
  if (o.bidirectional_) s += ", bidirectional=True";
  return s;
}

RNN::RNN(const RnnOptions& o, Generator& gen) : RNNBase(rnn_mode(o.nonlinearity_, "RNN"), o, gen) {}

RNN::RNN(int64_t input_size, int64_t hidden_size, int64_t num_layers,
         const std::string& nonlinearity, bool bias, bool batch_first, double dropout,
         bool bidirectional, Generator& gen)
    : RNN(positional_options(input_size, hidden_size, num_layers, nonlinearity, bias, batch_first,
                             dropout, bidirectional),
          gen) {}

LSTM::LSTM(const RnnOptions& o, Generator& gen) : RNNBase(ops::RnnMode::Lstm, o, gen) {}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first,
           double dropout, bool bidirectional, Generator& gen)
    : LSTM(positional_options(input_size, hidden_size, num_layers, "tanh", bias, batch_first,
                              dropout, bidirectional),
           gen) {}

GRU::GRU(const RnnOptions& o, Generator& gen) : RNNBase(ops::RnnMode::Gru, o, gen) {}

GRU::GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first,
         double dropout, bool bidirectional, Generator& gen)
    : GRU(positional_options(input_size, hidden_size, num_layers, "tanh", bias, batch_first,
                             dropout, bidirectional),
          gen) {}

// ---- cells -------------------------------------------------------------------------------------

RNNCellBase::RNNCellBase(ops::RnnMode m, int64_t in, int64_t hidden, bool bias, Generator& gen)
    : input_size(in), hidden_size(hidden), mode(m) {
  VT_CHECK(in > 0 && hidden > 0,
           "{}Cell: input_size and hidden_size must be positive, got {} and {}", mode_name(m), in,
           hidden);
  const int64_t G = ops::rnn_gates(m);
  weight_ih = register_parameter("weight_ih", ops::empty({G * hidden, in}));
  weight_hh = register_parameter("weight_hh", ops::empty({G * hidden, hidden}));
  if (bias) {
    bias_ih = register_parameter("bias_ih", ops::empty({G * hidden}));
    bias_hh = register_parameter("bias_hh", ops::empty({G * hidden}));
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  for (const Tensor& t : {weight_ih, weight_hh, bias_ih, bias_hh})
    if (t.defined()) init::uniform_(t, -bound, bound, gen);
}

RnnState RNNCellBase::step(const Tensor& input, const RnnState& state) {
  const std::string who = std::string(mode_name(mode)) + "Cell";
  VT_CHECK(
      input.defined() && (input.dim() == 1 || input.dim() == 2) && input.size(-1) == input_size,
      "{}: expected input of shape [B, {}] or [{}], got {}", who, input_size, input_size,
      input.defined() ? input.shape() : Dims{});
  const bool batched = input.dim() == 2, lstm = mode == ops::RnnMode::Lstm;
  const Tensor x = batched ? input : ops::unsqueeze(input, 0);
  const int64_t B = x.size(0);
  const Tensor h = state_or_zeros(state.h, {B, hidden_size}, batched, x, who.c_str(), "h");
  const Tensor c =
      lstm ? state_or_zeros(state.c, {B, hidden_size}, batched, x, who.c_str(), "c") : Tensor();
  const Tensor xp = ops::unsqueeze(ops::linear(x, weight_ih, bias_ih), 0);  // [1, B, G H]
  ops::RnnSequence r = ops::rnn_sequence(mode, xp, weight_hh, bias_hh, h, c);
  RnnState out{r.h_n, r.c_n};
  if (!batched) {
    out.h = ops::squeeze(out.h, 0);
    if (lstm) out.c = ops::squeeze(out.c, 0);
  }
  return out;
}

std::string RNNCellBase::extra_repr() const {
  std::string s = fmt::format("{}, {}", input_size, hidden_size);
  if (!bias_ih.defined()) s += ", bias=False";
  if (mode == ops::RnnMode::Relu) s += ", nonlinearity=relu";
  return s;
}

RNNCell::RNNCell(int64_t in, int64_t hidden, bool bias, const std::string& nonlinearity,
                 Generator& gen)
    : RNNCellBase(rnn_mode(nonlinearity, "RNNCell"), in, hidden, bias, gen) {}

Tensor RNNCell::forward(const Tensor& input, const Tensor& h) { return step(input, {h, {}}).h; }

LSTMCell::LSTMCell(int64_t in, int64_t hidden, bool bias, Generator& gen)
    : RNNCellBase(ops::RnnMode::Lstm, in, hidden, bias, gen) {}

RnnState LSTMCell::forward(const Tensor& input, const RnnState& state) {
  return step(input, state);
}

GRUCell::GRUCell(int64_t in, int64_t hidden, bool bias, Generator& gen)
    : RNNCellBase(ops::RnnMode::Gru, in, hidden, bias, gen) {}

Tensor GRUCell::forward(const Tensor& input, const Tensor& h) { return step(input, {h, {}}).h; }

}  // namespace vitrine::nn
