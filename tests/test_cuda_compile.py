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

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")


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


def test_sources_found():
    assert (CUDA / "common").is_dir()
    if not SOURCES:
        pytest.skip("no .cu files under cuda/ yet")


@pytest.mark.parametrize("src", SOURCES)
def test_compiles_for_sm90(compiled, src):
    cmd, rc, msg = compiled[src]
    if rc != 0:
        pytest.fail(f"{src} does not compile for {ARCH} (exit {rc}):\n$ {' '.join(cmd)}\n{msg}", pytrace=False)
