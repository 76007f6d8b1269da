"""The variants of model=wide_lr and model=wide_fm (cuWide), and the shared-memory limit of the warp
design's hot-row cache, in one place: the config checks, the model and its GPU code all read these
(this module imports nothing of the model's code)."""
from pipeline.registry import BASELINE, OURS, Registry, VariantInfo

_VARIANTS = [
    VariantInfo("flow", OURS, "cuda", "one persistent fused kernel (Aggregate, Loss, Apply) over the flow of chunks"),
    VariantInfo("stage", BASELINE, "cuda", "the stage-based schema: three kernels per mini-batch, one CUDA graph an epoch"),
    VariantInfo("torch", BASELINE, "cuda", "PyTorch embedding lookups with sparse gradients + SGD", needs=("torch",)),
    VariantInfo("cpu", OURS, "cpu", "the float64 NumPy/SciPy reference trainer"),
]
LR = Registry("wide_lr", _VARIANTS, cpu_default="cpu", paper="flow")
FM = Registry("wide_fm", _VARIANTS, cpu_default="cpu", paper="flow")
BY_MODEL = {"wide_lr": LR, "wide_fm": FM}

HOT_CACHE_SMEM_MAX = 227 * 1024       # dynamic shared memory a block may opt in to on sm_90


def packed_width(k: int) -> int:
    """Floats per packed parameter row of the warp design: [w, v_0..v_{k-1}] padded to a multiple of 4."""
    return 1 if k == 0 else (k + 4) & ~3


def hot_cache_bytes(hc: int, k: int) -> int:
    """Shared memory of the warp design's hot-row cache: the rows and their step gradient (AdaGrad's
    accumulators stay in global memory), and the cached bias with each warp's step gradient of it
    (36 floats)."""
    return 8 * int(hc) * packed_width(int(k)) + (4 * 36 if hc else 0)
