// The kernel families' op lists, one place for both compilers: backends/backend.h (the host
// compiler) and backends/cuda/kernels.cuh (nvcc) each build their enum from these lists, and the
// CUDA backend builds its switches from them, so the two enums cannot drift apart and a new op's
// name is written once. Each list calls X(Name) per op, in enum order; append new ops where they
// belong and leave the others' order alone (kernels compare ranges of values, e.g. comparisons).
// Plain preprocessor only: this header includes nothing and is read by host code and nvcc alike.
//
// Adding an elementwise op (docs/adding-an-op.md): its name here, its formula in each backend
// (backends/cpu/elementwise.cpp and backends/cuda/elementwise.cu; the CUDA one is a compile error
// until written), the op in ops/, its tests.
#pragma once

/// y = f(x, alpha, beta) per element (backends/backend.h: UnaryOp).
#define VITRINE_UNARY_OPS(X)                      \
  X(Neg)                                          \
  X(Exp)                                          \
  X(Log)                                          \
  X(Sqrt)                                         \
  X(Rsqrt)                                        \
  X(Abs)                                          \
  X(Tanh)                                         \
  X(Sigmoid)                                      \
  X(Softplus) /* y = log(1 + e^x) */              \
  X(Relu)                                         \
  X(Gelu)                                         \
  X(GeluTanh)                                     \
  X(Sign)                                         \
  X(PowScalar) /* y = x ^ alpha */                \
  X(Clamp)     /* y = min(max(x, alpha), beta) */ \
  X(AddScalar) /* y = x + alpha */                \
  X(MulScalar) /* y = x * alpha */                \
  X(Sin)                                          \
  X(Cos)                                          \
  X(Log1p) /* y = log(1 + x) */                   \
  X(Expm1) /* y = e^x - 1 */

/// out = f(a, b) per element with broadcasting (backends/backend.h: BinaryOp). Eq..Ge write bool
/// and must stay together, in this order.
#define VITRINE_BINARY_OPS(X)                                         \
  X(Add)                                                              \
  X(Sub)                                                              \
  X(Mul)                                                              \
  X(Div)                                                              \
  X(Pow)                                                              \
  X(Maximum)                                                          \
  X(Minimum)                                                          \
  X(Eq)                                                               \
  X(Ne)                                                               \
  X(Lt)                                                               \
  X(Le)                                                               \
  X(Gt)                                                               \
  X(Ge)                                                               \
  X(GeluBackward)     /* out = dy * gelu'(x)       (a = x, b = dy) */ \
  X(GeluTanhBackward) /* out = dy * gelu_tanh'(x)  (a = x, b = dy) */ \
  X(ReluBackward)     /* out = x > 0 ? dy : 0      (a = x, b = dy) */

/// Reductions over a set of dims (backends/backend.h: ReduceOp).
#define VITRINE_REDUCE_OPS(X) \
  X(Sum)                      \
  X(Mean)                     \
  X(Max)                      \
  X(Min)                      \
  X(ArgMax)                   \
  X(ArgMin)

/// One enumerator per op: enum class UnaryOp { VITRINE_UNARY_OPS(VITRINE_OP_ENUMERATOR) };
#define VITRINE_OP_ENUMERATOR(name) name,
