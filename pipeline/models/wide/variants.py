"""The variants of model=wide_lr and model=wide_fm (cuWide), and the shared-memory limit of the warp
design's hot-row cache, in one place: the config checks, the model and its GPU code all read these
(this module imports nothing of the model's code)."""
import math

from pipeline.registry import BASELINE, OURS, Registry, VariantInfo

_VARIANTS = [
    VariantInfo("flow", OURS, "cuda", "one persistent fused kernel (Aggregate, Loss, Apply) over the flow of chunks"),
    VariantInfo("stage", BASELINE, "cuda", "the stage-based schema: three kernels per mini-batch, one CUDA graph an epoch"),
    VariantInfo("torch", BASELINE, "cuda", "PyTorch embedding lookups with sparse gradients + SGD", needs=("torch",)),
    VariantInfo("cpu", OURS, "any", "the float64 NumPy/SciPy reference trainer (a GPU run trains it too, as the reference)"),
]
LR = Registry("wide_lr", _VARIANTS, cpu_default="cpu", paper="flow")
FM = Registry("wide_fm", _VARIANTS, cpu_default="cpu", paper="flow")

HOT_CACHE_SMEM_MAX = 227 * 1024       # dynamic shared memory a block may opt in to on sm_90


def packed_width(k: int) -> int:
    """Floats per packed parameter row of the warp design: [w, v_0..v_{k-1}] padded to a multiple of 4."""
    return 1 if k == 0 else (k + 4) & ~3


def hot_cache_bytes(hc: int, k: int, hot_accumulators: bool = False) -> int:
    """Shared memory of the warp design's hot-row cache: the rows and their step gradient, the cached
    bias with each warp's step gradient of it (36 floats), and with ``hot_accumulators`` (AdaGrad, LR:
    :func:`caches_hot_accumulators`) the rows' accumulators, the block's squares of the step and the
    other blocks' of the last step (3 floats a row)."""
    return 8 * int(hc) * packed_width(int(k)) + (4 * 36 if hc else 0) + (12 * int(hc) if hot_accumulators else 0)


def hot_fixed_exponent(k: int, hc: int, update: str, step_bound: float, samples_per_block_step: int) -> int:
    """LR with the warp design's hot-row cache and update=chunk: the exponent E of the cached rows' step
    gradient held as int32 in units of 2^-E (native shared-memory integer atomics instead of float
    compare-and-swap loops; ``cuda/wide/wide.cu``, HQ), or 0 for float atomics. E keeps the largest
    step sum of a coordinate (``samples_per_block_step`` x ``step_bound``, the largest per-edge
    gradient) within 2^30, one bit below int32's limit, and is used only where that leaves a resolution
    of 2^-30 or finer (below a float32 weight's rounding step for |w| >= 0.01); capped at 60."""
    if k or hc <= 0 or update != "chunk":
        return 0
    e = _int32_exponent(float(samples_per_block_step) * float(step_bound))
    return e if e >= 30 else 0


def hot_square_exponent(samples_per_block_step: int, max_square: float, init: float) -> int:
    """AdaGrad with the hot rows' accumulators cached (:func:`caches_hot_accumulators`): the exponent E of
    a block's squares of a step held as int32 in units of 2^-E (native shared-memory integer atomics
    that return the sum, instead of compare-and-swap loops), or 0 for float atomics. E keeps the
    largest step sum (``samples_per_block_step`` x ``max_square``) within 2^30 and is used only where
    the resolution 2^-E is at most 1e-5 of the smallest accumulator (``init``, model.adagrad_init);
    capped at 60."""
    e = _int32_exponent(float(samples_per_block_step) * float(max_square))
    return e if init > 0.0 and 2.0 ** -e <= 1e-5 * float(init) else 0


def _int32_exponent(bound: float) -> int:
    """The largest E <= 60 with bound x 2^E <= 2^30 (60 for a bound of 0): a step sum of at most
    ``bound`` held as int32 in units of 2^-E stays one bit below int32's limit."""
    return min(math.floor(math.log2(2.0 ** 30 / bound)), 60) if bound > 0.0 else 60


def adagrad_supported(mc) -> bool:
    """Where flow trains with AdaGrad: the warp design (``model.design=warp``) with asynchronous
    per-chunk updates (``model.update=chunk``); the cpu reference follows the same rule."""
    return str(mc.get("design", "chunk")) == "warp" and str(mc.get("update", "chunk")) == "chunk"


def resolved_optimizer(mc) -> str:
    """``model.optimizer`` as flow and cpu train it in a run: ``sgd`` or ``adagrad`` as given; ``auto``
    (the default): ``adagrad`` where it is supported (:func:`adagrad_supported`), else ``sgd``. The
    model resolves it and hands the result to its trainers (flow falling back to design=chunk out of
    core trains ``sgd`` then, with a notice)."""
    opt = str(mc.get("optimizer", "sgd"))
    if opt == "auto":
        return "adagrad" if adagrad_supported(mc) else "sgd"
    return opt


def caches_hot_accumulators(mc, optimizer=None) -> bool:
    """AdaGrad with the warp design's hot-row cache (``model.warp.hot_cache``), LR: the cached rows'
    accumulators in shared memory too (FM's, and those of uncached rows, are global). ``optimizer``:
    the one trained (the config check passes :func:`resolved_optimizer`); None: the config's as it is
    written (what the GPU trainers take: ``auto`` there trains SGD)."""
    opt = str(mc.get("optimizer", "sgd")) if optimizer is None else str(optimizer)
    return opt == "adagrad" and int(mc.get("k", 0)) == 0 and int(mc.warp.hot_cache) > 0
