"""Kernel loader: compiles ``cuda/<model>/<file>.cu`` with PyCUDA's ``SourceModule``.

* ``-arch`` comes from the device (sm_90 on Hopper); ``cuda/common`` is on the include path.
* Compiled cubins are cached (PyCUDA's cache, under the project's cache dir) so a second run does
  not recompile; the in-process cache avoids even the lookup.
* Sources are compiled as C++ (``no_extern_c``): kernels declare ``extern "C" __global__``.
* :class:`Kernel` launches with any array that has ``__cuda_array_interface__`` (CuPy, PyCUDA,
  PyTorch), passing its device pointer.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple

import numpy as np

from pipeline.errors import GpuError
from pipeline.root import CUDA_DIR, OUTPUTS_DIR, PROJECT_ROOT

COMMON = CUDA_DIR / "common"
DEFAULT_OPTIONS = ("-O3", "-lineinfo", "-std=c++17")

_modules: Dict[tuple, "Module"] = {}


def source_path(model: str, filename: str) -> Path:
    p = CUDA_DIR / model / filename
    if not p.is_file():
        raise GpuError(f"kernel source {p} is missing")
    return p


def _cache_dir() -> str:
    d = os.environ.get("PYCUDA_CACHE_DIR") or str(OUTPUTS_DIR / "cache" / "pycuda")
    os.makedirs(d, exist_ok=True)
    return d


def load(model: str, filename: str, defines: Optional[Dict[str, object]] = None,
         options: Iterable[str] = ()) -> "Module":
    """Compile (or fetch from cache) one ``.cu`` file of ``cuda/<model>/``."""
    from pipeline.gpu import device

    defines = dict(defines or {})
    key = (model, filename, tuple(sorted(defines.items())), tuple(options))
    if key in _modules:
        return _modules[key]
    info = device.info()
    from pycuda.compiler import SourceModule

    path = source_path(model, filename)
    opts = list(DEFAULT_OPTIONS) + [f"-D{k}={v}" for k, v in defines.items()] + list(options)
    try:
        mod = SourceModule(path.read_text(), options=opts, arch=info.arch, no_extern_c=True,
                           include_dirs=[str(COMMON), str(path.parent)], cache_dir=_cache_dir())
    except Exception as e:
        first = str(e).strip().splitlines()
        raise GpuError(f"{path.relative_to(PROJECT_ROOT)} failed to compile for {info.arch}: "
                       f"{' | '.join(first[:6])}") from e
    _modules[key] = Module(mod, path)
    return _modules[key]


def require_block(kernel, threads: int, knob: str, value, fix: str) -> None:
    """A ConfigError naming ``knob=value`` when a block of ``threads`` exceeds what ``kernel`` can
    launch with its registers per thread (instead of the driver's "too many resources" at launch)."""
    if threads > kernel.max_threads:
        from pipeline.errors import ConfigError
        raise ConfigError(f"{knob}={value}: a block of {threads} threads exceeds the {kernel.max_threads} this "
                          f"kernel can launch ({kernel.registers} registers a thread); use {fix}")


def ptr(a) -> int:
    """Device pointer of an array-like (CUDA array interface) or an int."""
    if a is None:
        return 0
    if isinstance(a, (int, np.integer)):
        return int(a)
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"expected a device array, got {type(a).__name__}")
    return int(cai["data"][0])


class Module:
    def __init__(self, mod, path: Path):
        self._mod = mod
        self.path = path
        self._fns: Dict[str, Kernel] = {}

    def kernel(self, name: str, signature: str) -> "Kernel":
        """``signature`` uses PyCUDA's prepare() codes: P pointer, i int32, f float32, Q uint64..."""
        k = self._fns.get(name)
        if k is None:
            fn = self._mod.get_function(name)
            fn.prepare(signature)
            k = Kernel(fn, name, signature)
            self._fns[name] = k
        return k


class Kernel:
    def __init__(self, fn, name: str, signature: str):
        self.fn = fn
        self.name = name
        self.signature = signature
        self._max_dyn_smem = 48 * 1024

    def allow_shared(self, nbytes: int) -> None:
        """Opt in to more than 48 KB of dynamic shared memory (Hopper: up to ~227 KB)."""
        import pycuda.driver as drv
        if nbytes > self._max_dyn_smem:
            self.fn.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, int(nbytes))
            self._max_dyn_smem = nbytes

    @property
    def registers(self) -> int:
        import pycuda.driver as drv
        return self.fn.get_attribute(drv.function_attribute.NUM_REGS)

    @property
    def max_threads(self) -> int:
        """The largest block this kernel can launch with (its registers per thread count)."""
        import pycuda.driver as drv
        return self.fn.get_attribute(drv.function_attribute.MAX_THREADS_PER_BLOCK)

    def __call__(self, grid: Tuple[int, ...], block: Tuple[int, ...], *args, shared: int = 0, stream=None):
        """Launch on ``stream`` (default: the current stream of :mod:`pipeline.gpu.graphs`, else
        the legacy default stream)."""
        if len(args) != len(self.signature):
            raise TypeError(f"{self.name}: expected {len(self.signature)} arguments, got {len(args)}")
        conv = [ptr(a) if code == "P" else a for code, a in zip(self.signature, args)]
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        block = tuple(int(b) for b in block) + (1,) * (3 - len(block))
        if shared > 48 * 1024:
            self.allow_shared(shared)
        if stream is None:
            from pipeline.gpu.graphs import current_stream
            stream = current_stream()
        self.fn.prepared_async_call(grid[:3], block, stream, *conv, shared_size=int(shared))
