// Every explanation method on CUDA against the CPU: the same tiny ViT (float64, so that only
// summation order separates the devices) and images on both, every method's patch grid and
// image-resolution map compared. Without a GPU the case says it is skipped, and why.
#include "explain/explain.h"
#include "test_util.h"
#include "tiny_vit.h"

using namespace vitrine;
using namespace vitrine::explain;
using vt_test::check_close;

TEST_CASE("explain on cuda: every method's maps match the CPU's") {
  if (!vt_test::gpu_or_skip()) return;
  const Device gpu = Device::parse("cuda");
  Generator g1(11), g2(11);
  models::VisionTransformer cpu(vt_test::tiny_vit_config(8, 12, 2), g1);
  models::VisionTransformer cuda(vt_test::tiny_vit_config(8, 12, 2), g2);
  cpu.to(kFloat64);
  cuda.to(kFloat64);
  cuda.to(gpu);
  Generator gi(4);
  Tensor x = ops::randn({3, 2, 8, 12}, gi, kFloat64);
  Options o;
  o.samples = 2;
  o.steps = 4;
  o.threshold = 0.5;
  const auto rc = explain::explain(cpu, x, {-1, -1, 0}, all_methods(), o);
  const auto rg = explain::explain(cuda, x.to(gpu), {-1, -1, 0}, all_methods(), o);
  REQUIRE(rc.size() == rg.size());
  for (size_t i = 0; i < rc.size(); ++i) {
    INFO(method_name(rc[i].method));
    check_close(rg[i].grid.to(kCPU), rc[i].grid, 1e-8, 1e-6);
    check_close(rg[i].map.to(kCPU), rc[i].map, 1e-8, 1e-6);
    for (size_t b = 0; b < rc[i].completeness_gap.size(); ++b)
      CHECK(rg[i].completeness_gap[b] == doctest::Approx(rc[i].completeness_gap[b]).epsilon(1e-6));
  }
}
