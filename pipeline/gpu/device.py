"""Device discovery and the one CUDA context every library shares.

The project retains the device's *primary* context (what ``pycuda.autoprimaryctx`` does, but for
any device index), so CuPy's cuBLAS/cuFFT/cuSPARSE baselines and our PyCUDA kernels run in the same
context and can pass arrays to each other without copies.
"""
from __future__ import annotations

import atexit
from dataclasses import dataclass
from typing import Optional

from pipeline.errors import GpuError


@dataclass
class DeviceInfo:
    index: int
    name: str
    cc: tuple
    sm_count: int
    l2_bytes: int
    smem_per_block_optin: int
    total_mem: int

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"


_info: Optional[DeviceInfo] = None
_ctx = None


def why_unavailable() -> Optional[str]:
    """None when a CUDA GPU with PyCUDA and CuPy is usable, else a one-line reason."""
    try:
        import pycuda.driver as drv
    except Exception as e:  # ImportError or a broken install
        return f"PyCUDA is not importable ({type(e).__name__}: {e}); install the 'cuda' extra: pip install -e '.[cuda]'"
    try:
        import importlib
        importlib.import_module("cupy")
    except Exception as e:
        return f"CuPy is not importable ({type(e).__name__}); install cupy-cuda13x"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return "no CUDA device found"
    except Exception as e:
        return f"no usable CUDA driver or device ({e})"
    return None


def exit_without_gpu(script: str) -> None:
    """For a GPU-only script (``scripts/``): end with a one-line error naming it and the reason when
    no GPU is usable, instead of a traceback from the first CUDA import."""
    reason = why_unavailable()
    if reason:
        raise SystemExit(f"error: {script} needs a GPU: {reason}")


def why_no_torch() -> Optional[str]:
    """None when PyTorch is importable and sees a CUDA GPU (the framework baselines), else a reason."""
    try:
        import torch
        if not torch.cuda.is_available():
            return "PyTorch sees no CUDA device"
    except Exception as e:
        return f"PyTorch is not importable ({type(e).__name__})"
    return None


def init(index: int = 0) -> DeviceInfo:
    """Retain and push device ``index``'s primary context (once per process)."""
    global _info, _ctx
    if _info is not None:
        if _info.index != index:
            raise GpuError(f"gpu={index}: this process already uses GPU {_info.index}; run one GPU per process")
        return _info
    reason = why_unavailable()
    if reason:
        raise GpuError(f"backend=cuda needs a GPU: {reason}; use backend=cpu to run the NumPy reference")
    import cupy
    import pycuda.driver as drv

    n = drv.Device.count()
    if not 0 <= index < n:
        raise GpuError(f"gpu={index} is out of range: this machine has {n} GPU(s) (0..{n - 1})")
    dev = drv.Device(index)
    _ctx = dev.retain_primary_context()
    _ctx.push()
    atexit.register(_release)
    cupy.cuda.Device(index).use()
    a = drv.device_attribute
    _info = DeviceInfo(index=index, name=dev.name(), cc=dev.compute_capability(),
                       sm_count=dev.get_attribute(a.MULTIPROCESSOR_COUNT), l2_bytes=dev.get_attribute(a.L2_CACHE_SIZE),
                       smem_per_block_optin=dev.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                       total_mem=dev.total_memory())
    return _info


def info() -> DeviceInfo:
    if _info is None:
        raise GpuError("the GPU layer is not initialised: call pipeline.gpu.device.init() first")
    return _info


def synchronize() -> None:
    import pycuda.driver as drv
    drv.Context.synchronize()


def _release() -> None:
    global _ctx
    if _ctx is None:
        return
    try:
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()
        _ctx.pop()
    except Exception:
        pass
    _ctx = None
