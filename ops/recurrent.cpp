// The recurrent op (ops/recurrent.h): one direction of one RNN/LSTM/GRU layer over a sequence,
// forward and backward side by side. The fused path (the CPU) keeps one node for the sequence:
//   forward, per step t (h_prev the previous step's h, or h0):
//     gates = h_prev W_hh^T + b_hh + x_proj[t]     one product, the adds as it is written
//     h[t] (, c[t]) = cell(gates)                  one pass (Backend::rnn_cell)
//   backward, per step from the last:
//     dh = doutput[t] + dh_next
//     dgates[t] (, dc) = cell'(dh, dc)             one pass (Backend::rnn_cell_backward)
//     dh_next = dgates[t] W_hh                     one product
//   then dW_hh = sum_t dgates[t]^T h_prev[t] (one product over all steps), db_hh = sum dgates,
//   dx_proj = dgates, dh0 = dh_next, dc0 = dc.
// The GRU keeps its hidden product apart (n = tanh(x_n + r (h W_hn^T + b_hn))), so its step is
// hidden = h_prev W_hh^T + b_hh and the cell reads x_proj[t] and hidden.
#include "ops/recurrent.h"

#include <atomic>

#include "backends/env_switch.h"
#include "ops/helpers.h"

namespace vitrine::ops {

using namespace detail;

int64_t rnn_gates(RnnMode mode) {
  switch (mode) {
    case RnnMode::Lstm:
      return 4;
    case RnnMode::Gru:
      return 3;
    default:
      return 1;
  }
}

namespace {

std::atomic<int> fused_override{-1};  // -1: the environment decides

Backend::RnnCell cell_of(RnnMode mode) {
  switch (mode) {
    case RnnMode::Tanh:
      return Backend::RnnCell::Tanh;
    case RnnMode::Relu:
      return Backend::RnnCell::Relu;
    case RnnMode::Lstm:
      return Backend::RnnCell::Lstm;
    case RnnMode::Gru:
      break;
  }
  return Backend::RnnCell::Gru;
}

Strided view_or_null(const Tensor& t) { return t.defined() ? t.strided() : Strided(); }

/// The composed path: the cell from ops, one step at a time (any device; the reference).
RnnSequence composed(RnnMode mode, const Tensor& x_proj, const Tensor& w_hh, const Tensor& b_hh,
                     const Tensor& h0, const Tensor& c0, bool reverse) {
  const int64_t T = x_proj.shape()[0], H = w_hh.shape()[1];
  Tensor h = h0, c = c0;
  std::vector<Tensor> outs(static_cast<size_t>(T));
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s;
    const Tensor xt = x_proj.select(0, t);
    if (mode == RnnMode::Gru) {
      const Tensor ht = linear(h, w_hh, b_hh);
      const Tensor r = sigmoid(xt.narrow(1, 0, H) + ht.narrow(1, 0, H));
      const Tensor z = sigmoid(xt.narrow(1, H, H) + ht.narrow(1, H, H));
      const Tensor n = tanh(xt.narrow(1, 2 * H, H) + r * ht.narrow(1, 2 * H, H));
      h = (1.0 - z) * n + z * h;
    } else {
      const Tensor g = xt + linear(h, w_hh, b_hh);
      if (mode == RnnMode::Tanh) {
        h = tanh(g);
      } else if (mode == RnnMode::Relu) {
        h = relu(g);
      } else {
        const Tensor i = sigmoid(g.narrow(1, 0, H)), f = sigmoid(g.narrow(1, H, H));
        const Tensor gg = tanh(g.narrow(1, 2 * H, H)), o = sigmoid(g.narrow(1, 3 * H, H));
        c = f * c + i * gg;
        h = o * tanh(c);
      }
    }
    outs[static_cast<size_t>(t)] = h;
  }
  return {stack(outs, 0), h, mode == RnnMode::Lstm ? c : Tensor()};
}

/// What the fused forward keeps for the backward.
struct FusedState {
  Tensor packed;  // [T (+1 for LSTM: c_n), B, H]: the outputs (and c_n)
  Tensor saved;   // [T, B, 4H]: LSTM's activations, GRU's r, z, n, hidden_n
  Tensor cs;      // [T, B, H]: LSTM's cell states
};

/// The fused forward; false (nothing done) where the backend has no cell kernel.
bool fused_forward(RnnMode mode, const Tensor& xp, const Tensor& w, const Tensor& bh,
                   const Tensor& h0, const Tensor& c0, bool reverse, FusedState& st) {
  NoGradGuard ng;
  const int64_t T = xp.shape()[0], B = xp.shape()[1], H = w.shape()[1];
  const int64_t GH = rnn_gates(mode) * H;
  const bool lstm = mode == RnnMode::Lstm, gru = mode == RnnMode::Gru;
  Backend& be = xp.backend();
  st.packed = empty_on(xp, {T + (lstm ? 1 : 0), B, H}, xp.dtype());
  if (lstm || gru) st.saved = empty_on(xp, {T, B, 4 * H}, xp.dtype());
  if (lstm) st.cs = empty_on(xp, {T, B, H}, xp.dtype());
  Tensor buf = empty_on(xp, {B, GH}, xp.dtype());  // gates (GRU: the hidden product)
  const Strided wT = w.mT().strided(), bias = view_or_null(bh);
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s, tp = reverse ? t + 1 : t - 1;
    const Tensor h_prev = s == 0 ? h0 : st.packed.select(0, tp);
    const Tensor xt = xp.select(0, t);
    const Strided xts = xt.strided();
    Backend::GemmEpilogue ep;
    if (bh.defined()) ep.bias = &bias;
    if (!gru) ep.add = &xts;
    be.gemm_fused(h_prev.strided(), wT, buf.strided(), ep);
    const Tensor c_prev = !lstm ? Tensor() : s == 0 ? c0 : st.cs.select(0, tp);
    const bool ran = be.rnn_cell(
        cell_of(mode), gru ? xts : buf.strided(), gru ? buf.strided() : Strided(),
        gru ? h_prev.strided() : view_or_null(c_prev),
        st.saved.defined() ? st.saved.select(0, t).strided() : Strided(),
        st.packed.select(0, t).strided(), lstm ? st.cs.select(0, t).strided() : Strided());
    if (!ran) {
      VT_ASSERT(s == 0);
      return false;
    }
  }
  if (lstm)
    be.copy(st.cs.select(0, reverse ? 0 : T - 1).strided(), st.packed.select(0, T).strided());
  return true;
}

}  // namespace

bool fused_rnn(const Tensor& x_proj) {
  const int o = fused_override.load();
  static const bool env = env_switch_on("VITRINE_FUSED_RNN");
  return x_proj.device() == kCPU && (o < 0 ? env : o == 1);
}

void set_fused_rnn(bool on) { fused_override.store(on ? 1 : 0); }

RnnSequence rnn_sequence(RnnMode mode, const Tensor& x_proj, const Tensor& w_hh, const Tensor& b_hh,
                         const Tensor& h0, const Tensor& c0, bool reverse) {
  const char* op = "rnn_sequence";
  check_defined(x_proj, op, "x_proj");
  check_defined(w_hh, op, "w_hh");
  check_defined(h0, op, "h0");
  check_float(x_proj, op);
  const int64_t G = rnn_gates(mode);
  VT_CHECK(w_hh.dim() == 2 && w_hh.shape()[0] == G * w_hh.shape()[1],
           "{}: w_hh must have shape [{} H, H], got {}", op, G, w_hh.shape());
  const int64_t H = w_hh.shape()[1];
  VT_CHECK(x_proj.dim() == 3 && x_proj.shape()[2] == G * H && x_proj.shape()[0] >= 1,
           "{}: x_proj must have shape [T >= 1, B, {}] (gates {} x hidden {}), got {}", op, G * H,
           G, H, x_proj.shape());
  const int64_t B = x_proj.shape()[1];
  check_same(x_proj, w_hh, op);
  check_same(x_proj, h0, op);
  VT_CHECK(h0.shape() == Dims({B, H}), "{}: h0 must have shape [{}, {}], got {}", op, B, H,
           h0.shape());
  if (b_hh.defined()) {
    check_same(x_proj, b_hh, op);
    VT_CHECK(b_hh.shape() == Dims({G * H}), "{}: b_hh must have shape [{}], got {}", op, G * H,
             b_hh.shape());
  }
  if (mode == RnnMode::Lstm) {
    check_defined(c0, op, "c0");
    check_same(x_proj, c0, op);
    VT_CHECK(c0.shape() == Dims({B, H}), "{}: c0 must have shape [{}, {}], got {}", op, B, H,
             c0.shape());
  }

  if (!fused_rnn(x_proj)) return composed(mode, x_proj, w_hh, b_hh, h0, c0, reverse);
  const Tensor xp = plain(x_proj), w = plain(w_hh), bh = plain(b_hh), h0c = plain(h0),
               c0c = plain(c0);
  FusedState st;
  if (!fused_forward(mode, xp, w, bh, h0c, c0c, reverse, st))
    return composed(mode, x_proj, w_hh, b_hh, h0, c0, reverse);

  const int64_t T = x_proj.shape()[0];
  const bool lstm = mode == RnnMode::Lstm, gru = mode == RnnMode::Gru;
  Tensor packed = st.packed;
  st.packed = packed.detach();  // the closure must not hold the node's own output (a cycle)
  packed = record(
      packed, "rnn_sequence", {x_proj, w_hh, b_hh, h0, c0},
      [mode, reverse, st, xp, w, h0c, c0c, has_bias = b_hh.defined(), T, B, H, G, lstm, gru](
          const Tensor& dpacked, const Needs& needs) -> Grads {
        NoGradGuard ng;
        Backend& be = xp.backend();
        const Tensor dp = plain(dpacked);
        const DType dt = xp.dtype();
        Tensor dx = empty_on(xp, {T, B, G * H}, dt);               // at x_proj: the gates' gradient
        Tensor dhid = gru ? empty_on(xp, {T, B, G * H}, dt) : dx;  // at h_prev W_hh^T + b_hh
        Tensor dh = empty_on(xp, {B, H}, dt), dh_next = zeros({B, H}, dt, xp.device());
        Tensor dc, dc_prev, dprev;
        if (lstm) {
          dc = contiguous(dp.select(0, T));
          dc_prev = empty_on(xp, {B, H}, dt);
        }
        if (gru) dprev = empty_on(xp, {B, H}, dt);
        for (int64_t s = T - 1; s >= 0; --s) {
          const int64_t t = reverse ? T - 1 - s : s, tp = reverse ? t + 1 : t - 1;
          be.binary(BinaryOp::Add, dp.select(0, t).strided(), dh_next.strided(), dh.strided());
          const Tensor h_prev = s == 0 ? h0c : st.packed.select(0, tp);
          const Tensor c_prev = !lstm ? Tensor() : s == 0 ? c0c : st.cs.select(0, tp);
          const Tensor prev = lstm ? c_prev : gru ? h_prev : Tensor();
          const Tensor out = lstm ? st.cs.select(0, t) : st.packed.select(0, t);
          const bool ran = be.rnn_cell_backward(
              cell_of(mode), view_or_null(st.saved.defined() ? st.saved.select(0, t) : Tensor()),
              view_or_null(prev), out.strided(), dh.strided(), view_or_null(dc),
              dx.select(0, t).strided(), gru ? dhid.select(0, t).strided() : Strided(),
              lstm ? dc_prev.strided() : view_or_null(dprev));
          VT_ASSERT(ran);
          if (lstm) std::swap(dc, dc_prev);
          Backend::GemmEpilogue ep;
          const Strided dps = view_or_null(dprev);
          if (gru) ep.add = &dps;
          be.gemm_fused(dhid.select(0, t).strided(), w.strided(), dh_next.strided(), ep);
        }
        Grads g(5);
        g[0] = dx;
        if (needs[1]) {  // dW_hh = sum_t dhid[t]^T h_prev[t]: the first step's, then the rest
          Tensor dw = empty_on(xp, {G * H, H}, dt);
          const int64_t t0 = reverse ? T - 1 : 0;
          be.gemm(dhid.select(0, t0).mT().strided(), h0c.strided(), dw.strided(), false);
          if (T > 1) {
            const Tensor dg = dhid.narrow(0, reverse ? 0 : 1, T - 1).reshape({(T - 1) * B, G * H});
            const Tensor hp = st.packed.narrow(0, reverse ? 1 : 0, T - 1).reshape({(T - 1) * B, H});
            be.gemm(dg.mT().strided(), hp.strided(), dw.strided(), true);
          }
          g[1] = dw;
        }
        if (needs[2] && has_bias) g[2] = sum(dhid.reshape({T * B, G * H}), {0});
        g[3] = dh_next;
        if (lstm) g[4] = dc;
        for (Tensor& gi : g)
          if (gi.defined()) gi = no_double_backward(gi, "rnn_sequence_backward", {xp, w});
        return g;
      });
  const Tensor output = packed.narrow(0, 0, T);
  return {output, packed.select(0, reverse ? 0 : T - 1), lstm ? packed.select(0, T) : Tensor()};
}

}  // namespace vitrine::ops
