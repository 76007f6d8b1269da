"""Every kernel source under cuda/ compiles for Hopper (sm_90) with nvcc, when nvcc is present.

New files are picked up by the glob. All files are compiled once, in parallel, by a module-scoped
fixture; each file is then its own test, failing with nvcc's message.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CUDA = ROOT / "cuda"
SOURCES = sorted(p.relative_to(ROOT).as_posix() for p in CUDA.rglob("*.cu"))
NVCC = shutil.which("nvcc")
ARCH = "sm_90"

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")


def command(src: str, out: Path) -> list:
    return [NVCC, f"-arch={ARCH}", "-cubin", "-std=c++17", f"-I{CUDA / 'common'}",
            f"-I{(ROOT / src).parent}", "-o", str(out), str(ROOT / src)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("cubin")

    def one(src):
        cmd = command(src, out / (src.replace("/", "_") + ".cubin"))
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return cmd, None, "nvcc timed out after 600 s"
        return cmd, r.returncode, (r.stderr + r.stdout).strip()

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        return dict(zip(SOURCES, pool.map(one, SOURCES)))


@needs_nvcc
def test_sources_found():
    assert (CUDA / "common").is_dir()
    if not SOURCES:
        pytest.skip("no .cu files under cuda/ yet")


@needs_nvcc
@pytest.mark.parametrize("src", SOURCES)
def test_compiles_for_sm90(compiled, src):
    cmd, rc, msg = compiled[src]
    if rc != 0:
        pytest.fail(f"{src} does not compile for {ARCH} (exit {rc}):\n$ {' '.join(cmd)}\n{msg}", pytrace=False)


# ------------------------------------------------------------- the GPU layer's host side, no GPU needed

def test_kernel_launch_argument_checks():
    """Kernel converts device arrays to pointers and refuses a wrong argument count."""
    import numpy as np
    from pipeline.gpu import kernels

    class Dev:      # anything with the CUDA array interface
        __cuda_array_interface__ = {"data": (1234, False), "shape": (1,), "typestr": "<f4", "version": 3}

    class Fn:
        def prepared_async_call(self, grid, block, stream, *args, shared_size=0):
            self.call = (grid, block, stream, args, shared_size)

    assert kernels.ptr(Dev()) == 1234 and kernels.ptr(None) == 0 and kernels.ptr(np.int64(5)) == 5
    with pytest.raises(TypeError, match="device array"):
        kernels.ptr(np.zeros(3))
    fn = Fn()
    k = kernels.Kernel(fn, "axpy", "PPif")
    k((4,), (128, 1), Dev(), Dev(), 7, np.float32(2.0), shared=1024)
    assert fn.call == ((4, 1, 1), (128, 1, 1), None, (1234, 1234, 7, np.float32(2.0)), 1024)
    with pytest.raises(TypeError, match="expected 4 arguments, got 3"):
        k((1,), (1,), Dev(), Dev(), 7)
    with pytest.raises(TypeError, match="expected 4 arguments, got 5"):
        k((1,), (1,), Dev(), Dev(), 7, 1.0, 9)


def test_kernel_source_missing_is_a_gpu_error():
    from pipeline.errors import GpuError
    from pipeline.gpu import kernels
    with pytest.raises(GpuError, match="missing"):
        kernels.source_path("no_such_model", "x.cu")
    assert kernels.COMMON == CUDA / "common"


def test_device_layer_without_gpu():
    from pipeline.errors import GpuError
    from pipeline.gpu import device
    reason = device.why_unavailable()
    if reason is None:
        pytest.skip("a GPU is present")
    assert "\n" not in reason
    with pytest.raises(GpuError, match="backend=cpu"):
        device.init(0)
    with pytest.raises(GpuError, match="not initialised"):
        device.info()
