// einsum (ops/sequence.h) as torch.einsum. The equation is parsed into one label per dim of each
// operand ('A'-'Z' are labels 0-25, 'a'-'z' 26-51, the dims of "..." 52 and up, right-aligned
// across operands). Then, with views and the ops they call (so gradients and second derivatives
// come for free):
//   1. a label repeated within one operand takes the diagonal (a strided view; its adjoint writes
//      dy onto the diagonal of zeros);
//   2. a label that no other operand and not the output holds is summed out at once;
//   3. operands are contracted left to right: with batch labels (in both, needed later),
//      contracted ones (in both, not needed later), and the labels of only one side,
//        A -> [batch, left-only, contracted] -> [Bt, M, K],  B -> [batch, contracted, right-only]
//        -> [Bt, K, N],  A @ B -> [Bt, M, N] -> [batch..., left-only..., right-only...]
//      (a size-1 dim against a larger one is expanded first: einsum broadcasts);
//   4. what is left is summed to the output's labels and permuted to its order.
#include <algorithm>
#include <array>
#include <cctype>

#include "ops/helpers.h"
#include "ops/sequence.h"

namespace vitrine::ops {

using namespace detail;

namespace {
constexpr int kLetters = 52;
constexpr int kMaxLabels = kLetters + kMaxDims;

/// The diagonal over dims i < j (dim j removed; both of one size) as a view.
Tensor diagonal_view(const Tensor& x, int i, int j);

/// zeros(shape) with dy written onto the diagonal over dims i and j (the adjoint of the view).
Tensor diagonal_embed(const Tensor& dy, const Dims& shape, int i, int j) {
  Tensor out = zeros(shape, dy.dtype(), dy.device());
  Dims s = shape, st = out.strides();
  st[i] += st[j];
  s.erase(j);
  st.erase(j);
  dy.backend().copy(dy.strided(), out.as_strided_view(s, st, 0).strided());
  return record(
      out, "einsum_diagonal_backward", {dy},
      [i, j](const Tensor& g, const Needs&) -> Grads { return {diagonal_view(g, i, j)}; });
}

Tensor diagonal_view(const Tensor& x, int i, int j) {
  Dims s = x.shape(), st = x.strides();
  st[i] += st[j];
  s.erase(j);
  st.erase(j);
  Tensor y = x.as_strided_view(s, st, x.offset());
  return record(y, "einsum_diagonal", {x},
                [in = x.shape(), i, j](const Tensor& dy, const Needs&) -> Grads {
                  return {diagonal_embed(dy, in, i, j)};
                });
}

char letter(int label) {
  if (label >= kLetters) return '.';
  return static_cast<char>(label < 26 ? 'A' + label : 'a' + label - 26);
}

/// An operand (or intermediate result) with the label of each of its dims.
struct Term {
  Tensor t;
  std::vector<int> labels;
};

struct Equation {
  std::vector<std::vector<int>> inputs;  // per operand: labels, -1 where "..." stands
  std::vector<int> output;               // the same, for the output
  bool explicit_output = false;
};

/// Splits the equation into terms of labels (spaces are ignored, as PyTorch).
Equation parse(const std::string& equation) {
  Equation eq;
  eq.inputs.emplace_back();
  std::vector<int>* term = &eq.inputs.back();
  for (size_t k = 0; k < equation.size(); ++k) {
    const char c = equation[k];
    if (c == ' ') continue;
    if (std::isalpha(static_cast<unsigned char>(c))) {
      term->push_back(c >= 'A' && c <= 'Z' ? c - 'A' : c - 'a' + 26);
    } else if (c == '.') {
      VT_CHECK(equation.compare(k, 3, "...") == 0 &&
                   std::find(term->begin(), term->end(), -1) == term->end(),
               "einsum: in \"{}\", '.' at index {} is not part of an ellipsis \"...\" (or a term "
               "has two)",
               equation, k);
      term->push_back(-1);
      k += 2;
    } else if (c == ',' && !eq.explicit_output) {
      eq.inputs.emplace_back();
      term = &eq.inputs.back();
    } else if (c == '-' && equation.compare(k, 2, "->") == 0 && !eq.explicit_output) {
      eq.explicit_output = true;
      term = &eq.output;
      ++k;
    } else {
      fail(
          "einsum: invalid subscript '{}' at index {} in the equation \"{}\" (subscripts must be "
          "in [a-zA-Z], terms separated by ',', one \"->\" before the output)",
          c, k, equation);
    }
  }
  return eq;
}

/// Sums t over the dims whose label `keep` does not hold.
void sum_unneeded(Term& a, const std::array<bool, kMaxLabels>& keep) {
  Dims dims;
  std::vector<int> left;
  for (int i = 0; i < static_cast<int>(a.labels.size()); ++i) {
    if (keep[a.labels[i]])
      left.push_back(a.labels[i]);
    else
      dims.push_back(i);
  }
  if (dims.empty()) return;
  a.t = sum(a.t, dims);
  a.labels = left;
}

/// a's dims permuted into the order of the label groups (which hold each of its labels once),
/// expanded to the labels' sizes, and reshaped to one dim per group.
Tensor arrange(const Term& a, const std::vector<std::vector<int>>& groups,
               const std::array<int64_t, kMaxLabels>& size) {
  Dims perm, shape, wide;
  for (const auto& g : groups) {
    int64_t n = 1;
    for (int l : g) {
      const int i =
          static_cast<int>(std::find(a.labels.begin(), a.labels.end(), l) - a.labels.begin());
      perm.push_back(i);
      wide.push_back(size[l]);
      n *= size[l];
    }
    shape.push_back(n);
  }
  // expand broadcasts a size-1 dim against the other operand's size
  return reshape(expand(permute(a.t, perm), wide), shape);
}

/// Contracts a and b over their shared labels that `keep` does not hold.
Term contract(const Term& a, const Term& b, const std::array<bool, kMaxLabels>& keep,
              const std::array<int64_t, kMaxLabels>& size) {
  std::vector<int> batch, contracted, left, right;
  for (int l : a.labels) {
    const bool shared = std::find(b.labels.begin(), b.labels.end(), l) != b.labels.end();
    (shared ? (keep[l] ? batch : contracted) : left).push_back(l);
  }
  for (int l : b.labels)
    if (std::find(a.labels.begin(), a.labels.end(), l) == a.labels.end()) right.push_back(l);
  Tensor y = matmul(arrange(a, {batch, left, contracted}, size),
                    arrange(b, {batch, contracted, right}, size));
  Term out;
  Dims shape;
  for (const auto* g : {&batch, &left, &right})
    for (int l : *g) {
      out.labels.push_back(l);
      shape.push_back(size[l]);
    }
  out.t = reshape(y, shape);
  return out;
}
}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  Equation eq = parse(equation);
  const size_t n = eq.inputs.size();
  VT_CHECK(operands.size() == n,
           "einsum: the equation \"{}\" has {} operand terms, but {} {} given", equation, n,
           operands.size(), operands.size() == 1 ? "operand was" : "operands were");
  for (size_t k = 0; k < n; ++k) {
    check_defined(operands[k], "einsum", "operand");
    check_float(operands[k], "einsum");
    check_same(operands[0], operands[k], "einsum");
  }
  // Resolve "..." into labels 52 + e, right-aligned over the widest ellipsis.
  std::vector<int> ell(n, 0);
  int ell_max = 0;
  for (size_t k = 0; k < n; ++k) {
    const auto& term = eq.inputs[k];
    const bool has = std::find(term.begin(), term.end(), -1) != term.end();
    const int named = static_cast<int>(term.size()) - (has ? 1 : 0), nd = operands[k].dim();
    VT_CHECK(has ? nd >= named : nd == named,
             "einsum: in \"{}\", operand {} has {} dims (shape {}) but its term has {} "
             "subscripts{}",
             equation, k, nd, operands[k].shape(), named, has ? " besides \"...\"" : "");
    ell[k] = has ? nd - named : 0;
    ell_max = std::max(ell_max, ell[k]);
  }
  auto expand_ellipsis = [&](const std::vector<int>& term, int count) {
    std::vector<int> out;
    for (int l : term) {
      if (l >= 0) {
        out.push_back(l);
        continue;
      }
      for (int e = ell_max - count; e < ell_max; ++e) out.push_back(kLetters + e);
    }
    return out;
  };
  std::vector<Term> terms(n);
  std::array<int64_t, kMaxLabels> size{};
  std::array<int, kMaxLabels> seen_in{}, count{};
  size.fill(-1);
  seen_in.fill(-1);
  for (size_t k = 0; k < n; ++k) {
    terms[k] = {operands[k], expand_ellipsis(eq.inputs[k], ell[k])};
    for (int i = 0; i < operands[k].dim(); ++i) {
      const int l = terms[k].labels[i];
      const int64_t s = operands[k].shape()[i];
      ++count[l];
      if (seen_in[l] == static_cast<int>(k)) {  // repeated within this operand: a diagonal
        const int first = static_cast<int>(
            std::find(terms[k].labels.begin(), terms[k].labels.end(), l) - terms[k].labels.begin());
        VT_CHECK(s == operands[k].shape()[first],
                 "einsum: in \"{}\", subscript {} is repeated in operand {} with sizes that "
                 "differ (shape {})",
                 equation, letter(l), k, operands[k].shape());
      }
      VT_CHECK(size[l] == -1 || size[l] == s || size[l] == 1 || s == 1,
               "einsum: in \"{}\", subscript {} has size {} in operand {} (shape {}), which does "
               "not broadcast with the size {} seen before",
               equation, letter(l), s, k, operands[k].shape(), size[l]);
      if (size[l] == -1 || size[l] == 1) size[l] = s;
      seen_in[l] = static_cast<int>(k);
    }
  }
  // The output's labels: given, or the letters seen once in label order after the "..." dims.
  std::vector<int> out;
  if (eq.explicit_output) {
    out = expand_ellipsis(eq.output, ell_max);
    for (size_t i = 0; i < out.size(); ++i) {
      VT_CHECK(out[i] >= kLetters || count[out[i]] > 0,
               "einsum: in \"{}\", output subscript {} does not appear in any operand", equation,
               letter(out[i]));
      VT_CHECK(std::find(out.begin() + i + 1, out.end(), out[i]) == out.end(),
               "einsum: in \"{}\", output subscript {} appears more than once", equation,
               letter(out[i]));
    }
  } else {
    for (int e = 0; e < ell_max; ++e) out.push_back(kLetters + e);
    for (int l = 0; l < kLetters; ++l)
      if (count[l] == 1) out.push_back(l);
  }
  // 1. diagonals
  for (Term& t : terms) {
    for (int i = 0; i < static_cast<int>(t.labels.size()); ++i)
      for (int j = static_cast<int>(t.labels.size()) - 1; j > i; --j)
        if (t.labels[j] == t.labels[i]) {
          t.t = diagonal_view(t.t, i, j);
          t.labels.erase(t.labels.begin() + j);
        }
  }
  // 2. and 3.: contract left to right, keeping the labels the output or a later operand needs.
  auto needed_after = [&](size_t k) {
    std::array<bool, kMaxLabels> keep{};
    for (int l : out) keep[l] = true;
    for (size_t m = k + 1; m < n; ++m)
      for (int l : terms[m].labels) keep[l] = true;
    return keep;
  };
  Term acc = terms[0];
  {
    std::array<bool, kMaxLabels> keep = needed_after(0);
    sum_unneeded(acc, keep);
  }
  for (size_t k = 1; k < n; ++k) {
    std::array<bool, kMaxLabels> keep = needed_after(k), keep_b = keep;
    for (int l : acc.labels) keep_b[l] = true;
    Term b = terms[k];
    sum_unneeded(b, keep_b);
    acc = contract(acc, b, keep, size);
  }
  // 4. to the output's order
  Dims perm;
  for (int l : out)
    perm.push_back(std::find(acc.labels.begin(), acc.labels.end(), l) - acc.labels.begin());
  return perm.size() == 0 ? acc.t : permute(acc.t, perm);
}

}  // namespace vitrine::ops
