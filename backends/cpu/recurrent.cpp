// The recurrent cells' gate nonlinearities, one time step in one pass (backends/backend.h:
// rnn_cell): what runs between the per-step product h_prev W_hh^T and the next step. Rows (the
// batch) run in parallel only for large steps (B H from 32768): a step of word_language_model
// (20 x 200) is tens of microseconds, less than waking the pool's threads costs on a busy machine,
// and it runs once per time step. Each element is computed by one thread in a fixed order, so the
// results do not depend on the thread count.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace vitrine::cpu {

namespace {

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// gates [B, 4H] (i, f, g, o), c_prev [B, H] -> saved [B, 4H] activations, c, h [B, H]
template <typename T>
void lstm_row(const T* gates, const T* c_prev, T* saved, T* h, T* c, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const T i = sigmoid(gates[j]), f = sigmoid(gates[H + j]);
    const T g = std::tanh(gates[2 * H + j]), o = sigmoid(gates[3 * H + j]);
    const T cj = f * c_prev[j] + i * g;
    c[j] = cj;
    h[j] = o * std::tanh(cj);
    saved[j] = i, saved[H + j] = f, saved[2 * H + j] = g, saved[3 * H + j] = o;
  }
}

// saved [B, 4H], c_prev, c, dh, dc [B, H] -> dgates [B, 4H], dc_prev [B, H]
template <typename T>
void lstm_row_backward(const T* saved, const T* c_prev, const T* c, const T* dh, const T* dc,
                       T* dgates, T* dc_prev, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const T i = saved[j], f = saved[H + j], g = saved[2 * H + j], o = saved[3 * H + j];
    const T tc = std::tanh(c[j]);
    const T dcj = (dc ? dc[j] : T(0)) + dh[j] * o * (T(1) - tc * tc);
    dgates[j] = dcj * g * i * (T(1) - i);
    dgates[H + j] = dcj * c_prev[j] * f * (T(1) - f);
    dgates[2 * H + j] = dcj * i * (T(1) - g * g);
    dgates[3 * H + j] = dh[j] * tc * o * (T(1) - o);
    dc_prev[j] = dcj * f;
  }
}

// gates [B, 3H] (x part), hidden [B, 3H] (h part), h_prev [B, H] -> saved [B, 4H], h [B, H]
template <typename T>
void gru_row(const T* gates, const T* hidden, const T* h_prev, T* saved, T* h, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const T r = sigmoid(gates[j] + hidden[j]), z = sigmoid(gates[H + j] + hidden[H + j]);
    const T hn = hidden[2 * H + j];
    const T n = std::tanh(gates[2 * H + j] + r * hn);
    h[j] = (T(1) - z) * n + z * h_prev[j];
    saved[j] = r, saved[H + j] = z, saved[2 * H + j] = n, saved[3 * H + j] = hn;
  }
}

// saved [B, 4H], h_prev, dh [B, H] -> dgates, dhidden [B, 3H], dprev = dh z [B, H]
template <typename T>
void gru_row_backward(const T* saved, const T* h_prev, const T* dh, T* dgates, T* dhidden, T* dprev,
                      int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const T r = saved[j], z = saved[H + j], n = saved[2 * H + j], hn = saved[3 * H + j];
    const T dn = dh[j] * (T(1) - z) * (T(1) - n * n);  // at n's pre-activation
    const T dz = dh[j] * (h_prev[j] - n) * z * (T(1) - z);
    const T dr = dn * hn * r * (T(1) - r);
    dgates[j] = dhidden[j] = dr;
    dgates[H + j] = dhidden[H + j] = dz;
    dgates[2 * H + j] = dn;
    dhidden[2 * H + j] = dn * r;
    dprev[j] = dh[j] * z;
  }
}

template <typename T>
const T* ptr_or_null(const Strided& s) {
  return s.data ? s.ptr<T>() : nullptr;
}

}  // namespace

bool CpuBackend::rnn_cell(RnnCell cell, const Strided& gates, const Strided& hidden,
                          const Strided& prev, const Strided& saved, const Strided& h,
                          const Strided& c) {
  if (gates.dtype != DType::Float32 && gates.dtype != DType::Float64) return false;
  const int64_t B = h.shape[0], H = h.shape[1];
  dispatch_float(gates.dtype, "rnn_cell", [&]<typename T>() {
    const T* g = gates.ptr<T>();
    T* hp = h.ptr<T>();
    switch (cell) {
      case RnnCell::Tanh:
      case RnnCell::Relu: {
        const bool tanh = cell == RnnCell::Tanh;
        parallel_for(B, H / 4, [&](int64_t b) {
          for (int64_t j = b * H; j < (b + 1) * H; ++j)
            hp[j] = tanh ? std::tanh(g[j]) : (g[j] > 0 ? g[j] : T(0));
        });
        break;
      }
      case RnnCell::Lstm:
        parallel_for(B, H, [&](int64_t b) {
          lstm_row(g + b * 4 * H, prev.ptr<T>() + b * H, saved.ptr<T>() + b * 4 * H, hp + b * H,
                   c.ptr<T>() + b * H, H);
        });
        break;
      case RnnCell::Gru:
        parallel_for(B, H, [&](int64_t b) {
          gru_row(g + b * 3 * H, hidden.ptr<T>() + b * 3 * H, prev.ptr<T>() + b * H,
                  saved.ptr<T>() + b * 4 * H, hp + b * H, H);
        });
        break;
    }
  });
  return true;
}

bool CpuBackend::rnn_cell_backward(RnnCell cell, const Strided& saved, const Strided& prev,
                                   const Strided& out, const Strided& dh, const Strided& dc,
                                   const Strided& dgates, const Strided& dhidden,
                                   const Strided& dprev) {
  if (dh.dtype != DType::Float32 && dh.dtype != DType::Float64) return false;
  const int64_t B = dh.shape[0], H = dh.shape[1];
  dispatch_float(dh.dtype, "rnn_cell_backward", [&]<typename T>() {
    const T* d = dh.ptr<T>();
    T* dg = dgates.ptr<T>();
    switch (cell) {
      case RnnCell::Tanh:
      case RnnCell::Relu: {
        const bool tanh = cell == RnnCell::Tanh;
        const T* y = out.ptr<T>();
        parallel_for(B, H / 4, [&](int64_t b) {
          for (int64_t j = b * H; j < (b + 1) * H; ++j)
            dg[j] = tanh ? d[j] * (T(1) - y[j] * y[j]) : (y[j] > 0 ? d[j] : T(0));
        });
        break;
      }
      case RnnCell::Lstm: {
        const T* dcp = ptr_or_null<T>(dc);
        parallel_for(B, H, [&](int64_t b) {
          lstm_row_backward(saved.ptr<T>() + b * 4 * H, prev.ptr<T>() + b * H, out.ptr<T>() + b * H,
                            d + b * H, dcp ? dcp + b * H : nullptr, dg + b * 4 * H,
                            dprev.ptr<T>() + b * H, H);
        });
        break;
      }
      case RnnCell::Gru:
        parallel_for(B, H, [&](int64_t b) {
          gru_row_backward(saved.ptr<T>() + b * 4 * H, prev.ptr<T>() + b * H, d + b * H,
                           dg + b * 3 * H, dhidden.ptr<T>() + b * 3 * H, dprev.ptr<T>() + b * H, H);
        });
        break;
    }
  });
  return true;
}

}  // namespace vitrine::cpu
