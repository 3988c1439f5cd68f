// nn::summary: a torchinfo-style table of any module (see summary.h).
#include "nn/summary.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "autograd/grad_mode.h"
#include "backends/error.h"
#include "ops/ops.h"

namespace vitrine::nn {

namespace {
/// 86567656 -> "86,567,656" (torchinfo's numbers)
std::string with_commas(int64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

/// What a forward hook saw of a module's output.
struct ModuleOutput {
  Dims shape;
  int64_t bytes = 0;
};

struct SummaryRow {
  std::string label, shape;
  int64_t params = 0;  // printed "--" when 0
  int depth = 0;
};

struct SummaryTotals {
  int64_t leaf_output_bytes = 0, param_bytes = 0;
};

/// One row per module, pre-order; a leaf module's row counts its parameters, a module with
/// children gets a Parameter row for each tensor it owns itself (the ViT's tokens). A tensor
/// shared by two modules counts on its first row only, as in num_parameters().
std::vector<SummaryRow> summary_rows(const std::vector<std::pair<std::string, Module*>>& modules,
                                     const std::map<const Module*, ModuleOutput>& outputs,
                                     SummaryTotals& totals) {
  std::vector<SummaryRow> rows;
  std::set<const TensorImpl*> counted;
  for (const auto& [name, mod] : modules) {
    const int depth =
        name.empty() ? 0 : static_cast<int>(std::count(name.begin(), name.end(), '.')) + 1;
    const bool leaf = mod->named_children().empty();
    const auto out = outputs.find(mod);
    if (leaf && out != outputs.end()) totals.leaf_output_bytes += out->second.bytes;
    SummaryRow row{name.empty() ? mod->type_name() : fmt::format("{} ({})", name, mod->type_name()),
                   out != outputs.end() ? out->second.shape.str() : "--", 0, depth};
    std::vector<SummaryRow> tensors;
    for (const auto& [pname, p] : mod->named_parameters(false)) {
      const int64_t n = counted.insert(p.impl_ptr().get()).second ? p.numel() : 0;
      totals.param_bytes += n * static_cast<int64_t>(dtype_size(p.dtype()));
      if (leaf)
        row.params += n;
      else
        tensors.push_back({fmt::format("{}{} (Parameter)", name.empty() ? "" : name + ".", pname),
                           p.shape().str(), n, depth + 1});
    }
    rows.push_back(row);
    rows.insert(rows.end(), tensors.begin(), tensors.end());
  }
  return rows;
}

std::string format_summary(const std::vector<SummaryRow>& rows, const SummaryTotals& totals,
                           int64_t total, int64_t trainable, int64_t input_bytes) {
  size_t label_w = std::string("Layer (type)").size(), shape_w = std::string("Output Shape").size();
  for (const SummaryRow& r : rows) {
    label_w = std::max(label_w, 2 * static_cast<size_t>(r.depth) + r.label.size());
    shape_w = std::max(shape_w, r.shape.size());
  }
  const size_t params_w = 12, width = label_w + 2 + shape_w + 2 + params_w;
  const std::string rule = std::string(width, '=') + "\n", thin = std::string(width, '-') + "\n";
  auto line = [&](const std::string& label, const std::string& shape, const std::string& params) {
    return fmt::format("{:<{}}  {:<{}}  {:>{}}\n", label, label_w, shape, shape_w, params,
                       params_w);
  };
  std::string out = rule + line("Layer (type)", "Output Shape", "Param #") + rule;
  for (const SummaryRow& r : rows)
    out += line(std::string(2 * static_cast<size_t>(r.depth), ' ') + r.label, r.shape,
                r.params ? with_commas(r.params) : "--");
  out += rule;
  out +=
      "Param #: parameters the row's module owns itself; its children's are on\n"
      "their rows, a container's own tensors (cls_token, pos_embed) on Parameter\n"
      "rows, so the rows add up to Total params. Output Shape --: the module is\n"
      "not called itself in an eval-mode forward (its owner calls its children,\n"
      "reads its tensors or skips it).\n";
  out += thin;
  out += fmt::format("Total params: {}\nTrainable params: {}\nNon-trainable params: {}\n",
                     with_commas(total), with_commas(trainable), with_commas(total - trainable));
  out += thin;
  auto mb = [](int64_t bytes) { return static_cast<double>(bytes) / 1e6; };
  out += fmt::format(
      "Input size (MB): {:.2f}\nForward pass size (MB): {:.2f} (the leaf modules' outputs)\n"
      "Params size (MB): {:.2f}\nEstimated total size (MB): {:.2f}\n",
      mb(input_bytes), mb(totals.leaf_output_bytes), mb(totals.param_bytes),
      mb(input_bytes + totals.leaf_output_bytes + totals.param_bytes));
  return out + rule;
}
}  // namespace

std::string summary(Module& m, const Dims& input_shape) {
  VT_CHECK(input_shape.size() >= 1 && input_shape[0] > 0,
           "summary: batch must be positive, got input shape {}", input_shape.str());
  // One forward on zeros, in eval mode and without gradients, with a forward hook on every module
  // recording its output. Whatever happens, the hooks go and the training flags come back.
  struct Restore {
    std::vector<std::pair<Module*, bool>> training = {};
    std::vector<std::pair<Module*, int64_t>> hooks = {};
    ~Restore() {
      for (auto& [mod, handle] : hooks) mod->remove_forward_hook(handle);
      for (auto& [mod, on] : training) mod->train(on);  // parents first: children keep their own
    }
  };
  const auto modules = m.named_modules();  // pre-order, children in registration order
  const std::vector<Tensor> params = m.parameters();
  Tensor input = params.empty() ? ops::zeros(input_shape)
                                : ops::zeros(input_shape, params[0].dtype(), params[0].device());
  std::map<const Module*, ModuleOutput> outputs;
  {
    Restore restore;
    for (const auto& [name, mod] : modules) {
      restore.training.emplace_back(mod, mod->is_training());
      restore.hooks.emplace_back(
          mod,
          mod->register_forward_hook([&outputs](Module& hooked, const Tensor&, const Tensor& y) {
            outputs[&hooked] = {y.shape(), y.numel() * static_cast<int64_t>(dtype_size(y.dtype()))};
            return Tensor();
          }));
    }
    m.eval();
    NoGradGuard no_grad;
    m(input);
  }
  SummaryTotals totals;
  const std::vector<SummaryRow> rows = summary_rows(modules, outputs, totals);
  int64_t listed = 0;
  for (const SummaryRow& r : rows) listed += r.params;
  VT_ASSERT(listed == m.num_parameters());
  return format_summary(rows, totals, m.num_parameters(), m.num_parameters(true),
                        input.numel() * static_cast<int64_t>(dtype_size(input.dtype())));
}

}  // namespace vitrine::nn
