"""What bench/compare.py compares and against which goals: the models, the sides (Vitrine,
PyTorch tuned and default), the explanation methods, issue 25's and 47's goals, the environment
variables each child runs without, OpenBLAS's kernel sets by vector width, the busy loop of
--load. See compare.py's docstring."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_BENCH = os.path.join(REPO, "bench", "torch_bench.py")
DEFAULT_VITRINE = os.path.join("build", "tools", "bench", "vitrine-bench")
MODELS = ["fmnist", "cifar10", "vit_small_patch16_224", "fmnist-resnet8", "resnet18"]
# The CNN rows (issue 47): vitrine-train's ResNet-8 on Fashion-MNIST (--set model.arch=resnet:
# 1x28x28, batch 128) and torchvision's ResNet-18 (3x224x224, batch 8), the same flags to both.
MODEL_FLAGS = {"fmnist-resnet8": ["--model", "fmnist", "--set", "model.arch=resnet"]}
SIDES = ["vitrine", "torch-tuned", "torch-default"]
SIDE_TITLES = {"vitrine": "Vitrine", "torch-tuned": "PyTorch tuned",
               "torch-default": "PyTorch default"}
METHODS = ["attention", "rollout", "grad-rollout", "chefer", "gradcam", "saliency", "smoothgrad",
           "integrated-gradients"]
# issue 25: Vitrine's images/s over PyTorch's, training and inference alike, on a quiet machine
SPEED_GOALS = {"fmnist": 2.0, "cifar10": 1.5, "vit_small_patch16_224": 1.25,
               "fmnist-resnet8": 1.25, "resnet18": 1.0}  # the CNNs': issue 47
# ... and under load (--load N): at least level with PyTorch under the same load
LOADED_SPEED_GOAL = 1.0
# issue 25: the share of its own sgemm peak that Vitrine's training step reaches, quiet
SHARE_GOALS = {"fmnist": 0.55, "cifar10": 0.60, "vit_small_patch16_224": 0.70}
MEMORY_GOAL = 1.0  # Vitrine's training peak over PyTorch's, at most
EXPLAIN_GOAL = 1.0  # PyTorch ms over Vitrine ms, more than
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS")
THREAD_PREFIXES = ("OMP_", "GOMP_", "KMP_")
REMOVED_VARS = THREAD_VARS + ("OPENBLAS_CORETYPE",)
# OpenBLAS kernel sets (openblas_get_corename, lower case) by vector width: the rule of
# openblas_kernels_current in backends/cpu/sgemm.cpp, which decides the same for Vitrine
OPENBLAS_AVX512 = ("skylakex", "cooperlake", "sapphirerapids")
OPENBLAS_AVX2 = ("haswell", "zen")


def openblas_current(core, flags):
    """Whether OpenBLAS's kernel set `core` is made for this CPU's vector width: on a CPU with
    AVX-512 only the AVX-512 sets count (Haswell on an AMD Zen 5 is a fallback), on one with AVX2
    the AVX2 sets too."""
    core = (core or "").lower()
    if core in OPENBLAS_AVX512:
        return True
    return core in OPENBLAS_AVX2 and "avx512f" not in flags


class Failure(Exception):
    pass


LOAD_CODE = "while True: pass"
LOAD_COMMAND_TEXT = f"python3 -c '{LOAD_CODE}'"
