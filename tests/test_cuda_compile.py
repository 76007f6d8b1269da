"""Every kernel source under cuda/ compiles for Hopper (sm_90) with nvcc, when nvcc is present.

New files are picked up by the glob. All files are compiled once, in parallel, by a module-scoped
fixture, with every warning an error (a user's run shows no compiler output); each file is then its
own test, failing with nvcc's message. Files whose kernels are specialised by ``-D`` defines are
also compiled with the defines the models pass (``DEFINES``).
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


# Define sets the models compile with, beside the files' own defaults (what a run of each model
# passes to kernels.load: LR with the hot-row cache and two samples a warp, FM without the cache;
# model.optimizer=adagrad for LR with the hot rows' accumulators cached, and for FM).
DEFINES = {
    "cuda/wide/wide.cu": [{"K": 0, "C": 32, "H": 256, "HC": 256, "WS": 2},
                          {"K": 10, "C": 32, "H": 256, "HC": 0, "WS": 1},
                          {"K": 0, "WS": 2, "NSH": 8, "HSH": 256, "HC": 256, "OPT": 1, "AHC": 1, "AQ": 26, "HQ": 31},
                          {"K": 10, "C": 32, "H": 256, "HC": 0, "WS": 4, "NSH": 4, "HSH": 32, "OPT": 1}],
}
BUILDS = [(src, None) for src in SOURCES] + \
         [(src, d) for src, sets in DEFINES.items() if src in SOURCES for d in sets]


def command(src: str, out: Path, defines=None) -> list:
    return [NVCC, f"-arch={ARCH}", "-cubin", "-std=c++17", "-Werror", "all-warnings", f"-I{CUDA / 'common'}",
            f"-I{(ROOT / src).parent}", *[f"-D{k}={v}" for k, v in (defines or {}).items()],
            "-o", str(out), str(ROOT / src)]


def build_id(build) -> str:
    src, defines = build
    return src + ("" if not defines else "[" + ",".join(f"{k}={v}" for k, v in defines.items()) + "]")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("cubin")

    def one(build):
        src, defines = build
        cmd = command(src, out / (build_id(build).replace("/", "_") + ".cubin"), defines)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return cmd, None, "nvcc timed out after 600 s"
        return cmd, r.returncode, (r.stderr + r.stdout).strip()

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        return dict(zip(map(build_id, BUILDS), pool.map(one, BUILDS)))


@needs_nvcc
def test_sources_found():
    assert (CUDA / "common").is_dir()
    if not SOURCES:
        pytest.skip("no .cu files under cuda/ yet")


@needs_nvcc
@pytest.mark.parametrize("build", BUILDS, ids=build_id)
@pytest.mark.slow
def test_compiles_for_sm90_without_warnings(compiled, build):
    cmd, rc, msg = compiled[build_id(build)]
    if rc != 0:
        pytest.fail(f"{build_id(build)} does not compile for {ARCH} without warnings (exit {rc}):\n"
                    f"$ {' '.join(cmd)}\n{msg}", pytrace=False)


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
