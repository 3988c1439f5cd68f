// interpolate: forward and gradients against PyTorch's F.interpolate (tests/fixtures/
// conv_interp.json, made by make_conv_interp_fixtures.py) in every mode, with align_corners and
// scale_factor semantics, float64 gradchecks, and argument errors.
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;
using Opts = ops::InterpolateOptions;

namespace {

const char* kFile = "conv_interp.json";

const nlohmann::json& case_json(const std::string& name) { return fixture_case(kFile, name); }

Opts options_of(const std::string& name) {
  const auto& p = case_json(name).at("params");
  Opts o;
  o.mode = p.at("mode").get<std::string>();
  if (!p.at("size").is_null()) o.size = {p.at("size")[0], p.at("size")[1]};
  if (!p.at("scale_factor").is_null())
    o.scale_factor = {p.at("scale_factor")[0], p.at("scale_factor")[1]};
  o.align_corners = p.at("align_corners");
  o.recompute_scale_factor = p.at("recompute_scale_factor");
  return o;
}

Fn interp_fn(const std::string& name) {
  Opts o = options_of(name);
  return [o](const V& in) { return ops::interpolate(in[0], o); };
}

/// Forward in float64 and float32 against PyTorch, and the backward of sum(y * r).
void check_case(const std::string& name) {
  INFO(name);
  check_forward(kFile, name, interp_fn(name), 1e-10, 1e-5);
  RefCase c = load_case(kFile, name);
  c.inputs[0].requires_grad_();
  ops::sum(interp_fn(name)(c.inputs) * fixture_tensor(case_json(name).at("r"))).backward();
  check_close(c.inputs[0].grad(), fixture_tensor(case_json(name).at("grads")[0]), 1e-10, 1e-10);
}

}  // namespace

TEST_CASE("interpolate: bilinear forward") {
  for (const char* name : {"bilinear_up_noac", "bilinear_down_noac", "bilinear_to_1x1_noac",
                           "bilinear_up_ac", "bilinear_down_ac", "bilinear_to_1x1_ac"})
    check_case(name);
  // Hand-worked, align_corners false: [0, 1] -> 4 samples at source 0 (clamped), 0.25, 0.75, 1.
  Opts o;
  o.mode = "bilinear";
  o.size = {1, 4};
  check_close(ops::interpolate(ops::tensor({0, 1}).reshape({1, 1, 1, 2}), o), {0, 0.25, 0.75, 1});
  o.align_corners = true;  // corners map onto corners: 0, 1/3, 2/3, 1
  check_close(ops::interpolate(ops::tensor({0, 1}).reshape({1, 1, 1, 2}), o),
              {0, 1.0 / 3, 2.0 / 3, 1});
}

TEST_CASE("interpolate: bicubic forward (align_corners false/true)") {
  for (const char* name : {"bicubic_up_noac", "bicubic_down_noac", "bicubic_mixed_noac",
                           "bicubic_up_ac", "bicubic_down_ac", "bicubic_mixed_ac"})
    check_case(name);
  // Bicubic reproduces a constant image exactly (the weights sum to 1), border clamping included.
  Opts o;
  o.mode = "bicubic";
  o.size = {5, 7};
  Tensor y = ops::interpolate(ops::full({1, 1, 3, 2}, 2.5), o);
  check_close(y, std::vector<double>(35, 2.5));
}

TEST_CASE("interpolate: nearest forward") {
  for (const char* name : {"nearest_up", "nearest_down", "nearest_double", "nearest_mixed"})
    check_case(name);
  // floor(dst * in / out): 3 -> 5 picks 0, 0, 1, 1, 2 (not the "nearest-exact" 0, 1, 1, 2, 2).
  Opts o;
  o.size = {1, 5};
  check_close(ops::interpolate(ops::tensor({0, 1, 2}).reshape({1, 1, 1, 3}), o), {0, 0, 1, 1, 2});
}

TEST_CASE("interpolate: scale_factor semantics (DINO's (grid + 0.1) / grid)") {
  // DINO resizes its 4x4 position-embedding grid with scale_factor ((6 + 0.1) / 4, (5 + 0.1) / 4):
  // the output is floor(4 * s) = (6, 5), and the source coordinate uses 1 / s, not 4 / 6.
  check_case("bicubic_dino");
  check_case("bicubic_dino_recompute");
  {
    RefCase a = load_case(kFile, "bicubic_dino"), b = load_case(kFile, "bicubic_dino_recompute");
    CHECK(a.output.shape() == Dims{1, 3, 6, 5});
    // The two fixtures share the input, so they differ only by the ratio used.
    CHECK(ops::max(ops::abs(a.output - b.output)).item() > 1e-3);
    // recompute_scale_factor = true is the same as asking for the size.
    Opts o;
    o.mode = "bicubic";
    o.size = {6, 5};
    check_close(ops::interpolate(b.inputs[0], o), b.output, 1e-10, 1e-10);
  }
  for (const char* name :
       {"nearest_scale", "nearest_scale_odd", "bilinear_scale", "bilinear_scale_same_size",
        "bilinear_scale_recompute", "bicubic_scale_ac"})
    check_case(name);
}

TEST_CASE("interpolate: gradcheck nearest") {
  for (const char* name : {"nearest_up", "nearest_down", "nearest_mixed", "nearest_scale_odd"}) {
    INFO(name);
    check_grad_at(kFile, name, interp_fn(name));
  }
}

TEST_CASE("interpolate: gradcheck bilinear") {
  for (const char* name :
       {"bilinear_up_noac", "bilinear_down_ac", "bilinear_scale", "bilinear_to_1x1_noac"}) {
    INFO(name);
    check_grad_at(kFile, name, interp_fn(name));
  }
}

TEST_CASE("interpolate: gradcheck bicubic") {
  for (const char* name : {"bicubic_up_noac", "bicubic_down_ac", "bicubic_dino", "bicubic_3d"}) {
    INFO(name);
    check_grad_at(kFile, name, interp_fn(name));
  }
  Opts o;
  o.mode = "bicubic";
  o.align_corners = true;
  o.size = {2, 9};
  check_grad([&](const V& in) { return ops::interpolate(in[0], o); }, {rand64({2, 1, 4, 3}, 11)});
}

TEST_CASE("interpolate: non-square") {
  check_case("bicubic_mixed_noac");  // 3x8 -> 6x5: up in height, down in width
  check_case("nearest_mixed");       // 5x3 -> 2x7
  check_case("bicubic_3d");          // [C, H, W] input
  Opts o;
  o.mode = "bilinear";
  o.size = {3, 10};
  CHECK(ops::interpolate(ops::zeros({2, 3, 5, 4}), o).shape() == Dims{2, 3, 3, 10});
  o.size.reset();
  o.scale_factor = {0.5, 2.75};
  CHECK(ops::interpolate(ops::zeros({3, 5, 4}), o).shape() == Dims{3, 2, 11});
}

TEST_CASE("interpolate: non-contiguous input") {
  Tensor x = rand64({1, 5, 4, 2}, 12).detach().permute({0, 3, 1, 2});  // [1, 2, 5, 4]
  for (const char* mode : {"nearest", "bilinear", "bicubic"}) {
    Opts o;
    o.mode = mode;
    o.size = {7, 3};
    check_close(ops::interpolate(x, o), ops::interpolate(x.contiguous(), o), 1e-12, 1e-12);
  }
}

TEST_CASE("interpolate: double backward is refused with a clear message") {
  Opts o;
  o.mode = "bilinear";
  o.size = {3, 3};
  Tensor x = rand64({1, 1, 2, 2}, 13);
  Tensor y = ops::interpolate(x, o);
  Tensor dy = rand64({1, 1, 3, 3}, 14);
  auto g = grad({y}, {x}, {dy}, /*retain_graph=*/true, /*create_graph=*/true);
  CHECK_ERROR_CONTAINS(ops::sum(g[0]).backward(), "interpolate_backward", "double backward");
}

TEST_CASE("interpolate: bad input") {
  Tensor x = ops::zeros({1, 1, 4, 4});
  Opts o;
  CHECK_ERROR_CONTAINS(ops::interpolate(x, o), "interpolate", "size", "scale_factor");
  o.size = {2, 2};
  o.scale_factor = {2.0, 2.0};
  CHECK_ERROR_CONTAINS(ops::interpolate(x, o), "interpolate", "only one of size and scale_factor");
  o.scale_factor.reset();
  o.mode = "trilinear";
  CHECK_ERROR_CONTAINS(ops::interpolate(x, o), "interpolate", "'trilinear'", "\"nearest\"",
                       "\"bilinear\"", "\"bicubic\"");
  o.mode = "nearest";
  o.align_corners = true;
  CHECK_ERROR_CONTAINS(ops::interpolate(x, o), "interpolate", "align_corners", "nearest");
  o.align_corners = false;
  CHECK_ERROR_CONTAINS(ops::interpolate(ops::zeros({4, 4}), o), "interpolate", "[4, 4]", "4-D",
                       "3-D");
  CHECK_ERROR_CONTAINS(ops::interpolate(ops::zeros({1, 1, 1, 4, 4}), o), "interpolate",
                       "[1, 1, 1, 4, 4]");
  CHECK_ERROR_CONTAINS(ops::interpolate(ops::zeros({1, 1, 4, 4}, kInt64), o), "interpolate",
                       "int64");
  o.size = {0, 3};
  CHECK_ERROR_CONTAINS(ops::interpolate(x, o), "interpolate", "size", "(0, 3)");
  o.size = {2, 2};
  o.recompute_scale_factor = true;
  CHECK_ERROR_CONTAINS(ops::interpolate(x, o), "interpolate", "recompute_scale_factor");
  o.recompute_scale_factor = false;
  o.size.reset();
  o.scale_factor = {-1.0, 2.0};
  CHECK_ERROR_CONTAINS(ops::interpolate(x, o), "interpolate", "scale_factor", "positive");
  o.scale_factor = {0.1, 2.0};  // floor(4 * 0.1) = 0 rows
  CHECK_ERROR_CONTAINS(ops::interpolate(x, o), "interpolate", "0x8", "4x4");
}
