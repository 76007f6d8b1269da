"""The variants of model=wide_lr and model=wide_fm (cuWide), and the shared-memory limit of the warp
design's hot-row cache, in one place: the config checks, the model and its GPU code all read these
(this module imports nothing of the model's code)."""
import math

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


def hot_fixed_exponent(k: int, hc: int, update: str, step_bound: float, samples_per_block_step: int) -> int:
    """LR with the warp design's hot-row cache and update=chunk: the exponent E of the cached rows' step
    gradient held as int32 in units of 2^-E (native shared-memory integer atomics instead of float
    compare-and-swap loops; ``cuda/wide/wide.cu``, HQ), or 0 for float atomics. E keeps the largest
    step sum of a coordinate (``samples_per_block_step`` x ``step_bound``, the largest per-edge
    gradient) within 2^30, one bit below int32's limit, and is used only where that leaves a resolution
    of 2^-30 or finer (below a float32 weight's rounding step for |w| >= 0.01); capped at 60."""
    if k or hc <= 0 or update != "chunk":
        return 0
    bound = float(samples_per_block_step) * float(step_bound)
    if not bound > 0.0:
        return 60
    e = math.floor(math.log2(2.0 ** 30 / bound))
    return min(e, 60) if e >= 30 else 0
