// The recurrent layers' op (ops/recurrent.cpp): one direction of one layer over a whole sequence,
// what nn::RNN, nn::LSTM, nn::GRU and their cells are made of. The input's product with W_ih is
// the caller's (one ops::linear over every time step); this op runs the per-step part.
#pragma once
#include "autograd/tensor.h"

namespace vitrine::ops {

/// The cell of a recurrent layer, PyTorch's gate order.
enum class RnnMode {
  Tanh,  ///< h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)
  Relu,  ///< h' = relu(x W_ih^T + b_ih + h W_hh^T + b_hh)
  Lstm,  ///< i, f, g, o = split(x W_ih^T + b_ih + h W_hh^T + b_hh);
         ///< c' = sigmoid(f) c + sigmoid(i) tanh(g),  h' = sigmoid(o) tanh(c')
  Gru,   ///< r, z, n = split(x W_ih^T + b_ih), split(h W_hh^T + b_hh) = hr, hz, hn;
         ///< r = sigmoid(r + hr), z = sigmoid(z + hz), n = tanh(n + r hn), h' = (1 - z) n + z h
};

/// Gates per hidden unit: 1, 1, 4, 3.
int64_t rnn_gates(RnnMode mode);

struct RnnSequence {
  Tensor output;  ///< [T, B, H]: h after each step, at its time position
  Tensor h_n;     ///< [B, H]: h after the last step
  Tensor c_n;     ///< [B, H]: LSTM's cell state after the last step (else undefined)
};

/// Runs one direction of a recurrent layer over T steps:
///   x_proj [T, B, G H] = x W_ih^T + b_ih (G = rnn_gates(mode)), w_hh [G H, H], b_hh [G H] or
///   undefined, h0 [B, H], c0 [B, H] (LSTM; else undefined). reverse: steps run from t = T - 1
///   down to 0 (a bidirectional layer's second direction); output[t] is h at time t either way.
/// On the CPU each step is one product (h W_hh^T, with b_hh and x_proj[t] added as it is written)
/// and one pass of the gate nonlinearities (Backend::rnn_cell); the backward walks the steps back
/// with one product per step and one pass per step, then forms dW_hh as one product over all
/// steps, so the graph holds one node for the whole sequence. Elsewhere, or with
/// VITRINE_FUSED_RNN=0, the same cell is composed from ops one step at a time (the reference the
/// tests compare the fused path with).
RnnSequence rnn_sequence(RnnMode mode, const Tensor& x_proj, const Tensor& w_hh, const Tensor& b_hh,
                         const Tensor& h0, const Tensor& c0 = Tensor(), bool reverse = false);

/// Whether rnn_sequence takes the fused path for x_proj (its backend has the kernel, and
/// VITRINE_FUSED_RNN is not 0); set_fused_rnn overrides the environment (tests, A/B).
bool fused_rnn(const Tensor& x_proj);
void set_fused_rnn(bool on);

}  // namespace vitrine::ops
