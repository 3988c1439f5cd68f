// The GPU paths that have not yet run on a GPU are off unless switched on (backends/gpu_paths.h):
// their table, their switches' values, and the choices made on the CPU side (bfloat16 operands,
// the multi-tensor Adam step) with the switch off and on. The CUDA backend asks the same
// gpu_path_enabled; its cases (tests/backends/test_cuda_*.cpp) turn each path on to run it.
#include <cstdlib>
#include <string>

#include "backends/gpu_paths.h"
#include "backends/matmul_precision.h"
#include "nn/optim/adam.h"
#include "ops/helpers.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;

TEST_CASE("gpu paths: every path that has not run on a GPU is off unless its switch is on") {
  const auto paths = gpu_paths();
  REQUIRE(paths.size() == 6);
  for (size_t i = 0; i < paths.size(); ++i) {
    const GpuPathInfo& p = paths[i];
    INFO(p.variable);
    CHECK(static_cast<size_t>(p.path) == i);
    CHECK(&gpu_path_info(p.path) == &p);
    CHECK_FALSE(p.default_on);  // none has passed a GPU run yet (docs/cuda.md)
    CHECK_FALSE(gpu_path_setting(p.path, nullptr));
    CHECK_FALSE(gpu_path_setting(p.path, ""));
    CHECK_FALSE(gpu_path_setting(p.path, "0"));
    CHECK(gpu_path_setting(p.path, "1"));
    CHECK_ERROR_CONTAINS(gpu_path_setting(p.path, "yes"), p.variable, "'yes'", "expected 1",
                         "or 0");
    // In this process: what the environment says, and off where it says nothing.
    const char* env = std::getenv(p.variable);
    CHECK(gpu_path_enabled(p.path) == (env != nullptr && std::string(env) == "1"));
  }
  CHECK(std::string(gpu_path_info(GpuPath::FlashAttention).variable) == "VITRINE_FLASH_ATTENTION");
  CHECK(std::string(gpu_path_info(GpuPath::CudaLt).variable) == "VITRINE_CUDA_LT");
  CHECK(std::string(gpu_path_info(GpuPath::Bf16Operands).variable) == "VITRINE_BF16_OPERANDS");
  CHECK(std::string(gpu_path_info(GpuPath::MultiTensorAdam).variable) ==
        "VITRINE_MULTI_TENSOR_ADAM");
}

TEST_CASE("gpu paths: set_gpu_path_enabled and its guard") {
  const bool before = gpu_path_enabled(GpuPath::CudaLt);
  {
    const GpuPathGuard on(GpuPath::CudaLt, true);
    CHECK(gpu_path_enabled(GpuPath::CudaLt));
    {
      const GpuPathGuard off(GpuPath::CudaLt, false);
      CHECK_FALSE(gpu_path_enabled(GpuPath::CudaLt));
    }
    CHECK(gpu_path_enabled(GpuPath::CudaLt));
    CHECK(gpu_path_enabled(GpuPath::FlashAttention) ==
          gpu_path_setting(GpuPath::FlashAttention, std::getenv("VITRINE_FLASH_ATTENTION")));
  }
  CHECK(gpu_path_enabled(GpuPath::CudaLt) == before);
}

TEST_CASE("gpu paths: linear layers take bfloat16 operands only with their switch on") {
  // The CPU takes the path under a test switch (ops/bf16_operands.cpp) and "medium": the same
  // question the CUDA backend's layers ask.
  ops::detail::set_bf16_operands_on_cpu(true);
  set_float32_matmul_precision("medium");
  const Tensor x = ops::zeros({2, 2});
  {
    const GpuPathGuard off(GpuPath::Bf16Operands, false);
    CHECK_FALSE(ops::detail::bf16_operands(x));
  }
  {
    const GpuPathGuard on(GpuPath::Bf16Operands, true);
    CHECK(ops::detail::bf16_operands(x));
  }
  set_float32_matmul_precision("highest");
  ops::detail::set_bf16_operands_on_cpu(false);
}

TEST_CASE("gpu paths: Adam and AdamW step to the same bits with the multi-tensor path off or on") {
  // The CPU's adam_step_multi is adam_step per tensor, so the two routes must agree exactly (the
  // same elementwise code in the same order; no BLAS involved).
  for (bool decoupled : {false, true}) {
    INFO((decoupled ? "AdamW" : "Adam"));
    std::vector<Tensor> out[2];
    std::vector<float> first;  // the first parameter before the steps
    for (int on = 0; on < 2; ++on) {
      const GpuPathGuard multi(GpuPath::MultiTensorAdam, on == 1);
      Generator gen(7);
      std::vector<Tensor> params;
      for (int64_t n : {5, 1, 300}) params.push_back(ops::randn({n}, gen).requires_grad_());
      first = params[0].to_vector<float>();
      nn::optim::ParamGroup g;
      g.params = params;
      g.lr = 1e-2;
      g.weight_decay = 0.1;
      std::unique_ptr<nn::optim::Optimizer> opt;
      if (decoupled)
        opt = std::make_unique<nn::optim::AdamW>(std::vector<nn::optim::ParamGroup>{g},
                                                 nn::optim::AdamWOptions{});
      else
        opt = std::make_unique<nn::optim::Adam>(std::vector<nn::optim::ParamGroup>{g},
                                                nn::optim::AdamOptions{});
      for (int step = 0; step < 3; ++step) {
        for (Tensor& p : params) p.set_grad(ops::randn(p.shape(), gen));
        opt->step();
      }
      for (const Tensor& p : params) out[on].push_back(p.detach());
    }
    for (size_t i = 0; i < out[0].size(); ++i)
      CHECK(out[0][i].to_vector<float>() == out[1][i].to_vector<float>());
    CHECK(out[0][0].to_vector<float>() != first);  // the steps did update
  }
}
