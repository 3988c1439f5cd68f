// chefer: Chefer et al.'s generic attention explainability (2021), R = R + mean_h max(0, G * A) R
// per block (chefer in explain.h).
#include "explain/explain.h"

namespace vitrine::explain {

namespace {

Explanation compute(const MethodContext& c) {
  Explanation e{};
  e.grid = chefer(c.pass());
  return e;
}

}  // namespace

VT_EXPLAIN_METHOD(chefer) {
  return {.name = "chefer",
          .help = "relevance propagated through the gradient-weighted attention (Chefer et al.)",
          .order = 40,
          .needs = {.attention = true, .gradients = true},
          .options = {},
          .compute = compute};
}

}  // namespace vitrine::explain
