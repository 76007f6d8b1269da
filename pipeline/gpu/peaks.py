"""The device's measured ceilings, so every variant can report its achieved fraction.

Measured once per device and cached as JSON under the cache dir: device-to-device copy bandwidth
(bytes read + written) and fp32 / TF32 GEMM FLOP/s through cuBLAS (CuPy), on random data.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pipeline.gpu.timer import time_cuda

# CuPy's matmul compute types (cupy/_core/_routines_linalg): DEFAULT keeps strict fp32 accumulate
# and operands; TF32 lets cuBLAS use the tensor cores with 10-bit mantissas.
_COMPUTE_DEFAULT, _COMPUTE_TF32 = 1, 7


@dataclass
class Peaks:
    device: str
    copy_gbps: float        # GB/s, bytes read + written
    fp32_tflops: float
    tf32_tflops: float

    def flops(self, precision: str = "fp32") -> float:
        return (self.tf32_tflops if precision == "tf32" else self.fp32_tflops) * 1e12

    def bandwidth(self) -> float:
        return self.copy_gbps * 1e9

    def floor_s(self, nbytes: float = 0.0, flops: float = 0.0, precision: str = "fp32") -> float:
        """The least time of work that moves ``nbytes`` and computes ``flops``: the larger of the two
        at the measured ceilings (what every model's ``pct_peak`` is measured against)."""
        return max(nbytes / self.bandwidth(), flops / self.flops(precision))


class _Bench:
    warmup, min_repeats, max_repeats, min_time_ms = 2, 10, 40, 50.0


@contextlib.contextmanager
def matmul_precision(precision: str):
    """Run CuPy float32/complex64 matmuls in ``fp32`` (strict) or ``tf32`` inside the block."""
    from cupy._core import _routines_linalg as linalg
    old = linalg.get_compute_type(np.float32)
    linalg.set_compute_type(np.float32, _COMPUTE_TF32 if precision == "tf32" else _COMPUTE_DEFAULT)
    try:
        yield
    finally:
        linalg.set_compute_type(np.float32, old)


def measure() -> Peaks:
    import cupy
    from pipeline.gpu import device

    info = device.info()

    def copy_gbps() -> float:
        n = 64 * 1024 * 1024  # 256 MiB of float32 each way
        src = cupy.random.random(n, dtype=cupy.float32)
        dst = cupy.empty_like(src)
        t = time_cuda(lambda: cupy.copyto(dst, src), _Bench)
        return 2 * src.nbytes / (t.median_ms * 1e-3) / 1e9

    def gemm_tflops(prec: str) -> float:
        m = 8192
        a = cupy.random.standard_normal((m, m), dtype=cupy.float32)
        b = cupy.random.standard_normal((m, m), dtype=cupy.float32)
        c = cupy.empty_like(a)
        with matmul_precision(prec):
            t = time_cuda(lambda: cupy.matmul(a, b, out=c), _Bench)
        return 2 * m ** 3 / (t.median_ms * 1e-3) / 1e12

    peaks = Peaks(info.name, copy_gbps(), gemm_tflops("fp32"), gemm_tflops("tf32"))
    cupy.get_default_memory_pool().free_all_blocks()
    return peaks


def get(cache_dir: str) -> Peaks:
    """Cached measurement for this device (measured on first use)."""
    from pipeline.gpu import device

    name = device.info().name
    path = Path(cache_dir) / f"peaks-{name.replace(' ', '_')}.json"
    if path.is_file():
        try:
            return Peaks(**json.loads(path.read_text()))
        except Exception:
            pass
    p = measure()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(p), indent=1))
    tmp.replace(path)
    return p
