#!/usr/bin/env python3
"""Per-kernel GPU time of one BCM layer step (forward + backward), for tuning.

Every kernel launch and FFT call of a variant is bracketed by CUDA events, with a long dummy kernel
queued first so the host's launch latency stays out of the numbers. Usage (on a GPU):

    python3 scripts/bcm_profile.py --layer A --k 64 --variants dft rfft fused
"""
import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer", default="A")
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--variants", nargs="+", default=["dft", "rfft", "fused"])
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    from pipeline.gpu.device import exit_without_gpu
    exit_without_gpu(Path(__file__).name)
    import cupy
    import pycuda.driver as drv
    from pipeline.gpu import device
    device.init(0)
    from pipeline.gpu import blas
    from pipeline.models.bcm import gpu, model
    from pipeline.gpu.timer import hold_kernel
    shape = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf/model/bcm.yaml").shapes[a.layer]
    case = model.make_case(a.layer, shape, a.k, 128, np.random.default_rng(0))
    hold = hold_kernel()
    times = defaultdict(list)

    def timed(name, fn):
        def wrapper(*args, **kw):
            hold((1,), (1,), np.uint64(200_000))   # keep the GPU busy while the host issues the call
            s, e = drv.Event(), drv.Event()
            s.record()
            out = fn(*args, **kw)
            e.record()
            e.synchronize()
            times[name].append(e.time_since(s))
            return out
        return wrapper

    orig_k, orig_rk, orig_rfft, orig_irfft, orig_cgemm = gpu._k, gpu._rk, cupy.fft.rfft, cupy.fft.irfft, blas.cgemm_batched
    for v in a.variants:
        times.clear()
        run = gpu._build_bcm(v)(case, None)
        run()
        gpu._k = lambda name: _Wrap(orig_k(name), name, timed)
        gpu._rk = lambda name: _Wrap(orig_rk(name), name, timed)
        cupy.fft.rfft = timed("cufft rfft", orig_rfft)
        cupy.fft.irfft = timed("cufft irfft", orig_irfft)
        blas.cgemm_batched = timed("cublas cgemm", orig_cgemm)
        try:
            for _ in range(a.reps):
                run()
        finally:
            gpu._k, gpu._rk, cupy.fft.rfft, cupy.fft.irfft, blas.cgemm_batched = (orig_k, orig_rk, orig_rfft, orig_irfft,
                                                                                 orig_cgemm)
        print(f"\n{a.layer} k={a.k} {v}: per call (median over {a.reps} steps)")
        total = 0.0
        for name, ts in times.items():
            per_step = np.median(ts) * len(ts) / a.reps
            total += per_step
            print(f"  {name:<22} {np.median(ts) * 1e3:9.1f} us x {len(ts) // a.reps}  = {per_step * 1e3:9.1f} us/step")
        print(f"  {'sum':<22} {total * 1e3:9.1f} us")


class _Wrap:
    def __init__(self, k, name, timed):
        self.k, self.name, self.timed = k, name, timed

    def __call__(self, *args, **kw):
        return self.timed(self.name, self.k.__call__)(*args, **kw)


if __name__ == "__main__":
    main()
