"""Every SLIDE GPU kernel once at tiny shapes, for compute-sanitizer (memcheck, racecheck):

    compute-sanitizer --tool memcheck python scripts/slide_sanitize.py

Covers the table build with FIFO overflow, the query in shared memory (with truncation) and in
global memory, training steps with lazy and dense Adam, the dense baseline and evaluation."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from pipeline.models.slide import reference as ref


class Split:
    def __init__(self, X, Y):
        self.X, self.Y = X, Y


def data(rng, n, F, N):
    X = sp.random(n, F, density=0.05, format="csr", dtype=np.float32, random_state=1)
    Y = sp.random(n, N, density=0.002, format="csr", dtype=np.float32, random_state=2)
    Y.data[:] = 1.0
    return Split(X, Y)


def main():
    from pipeline.gpu import device
    device.init(0)
    import cupy as cp
    from pipeline.models.slide import gpu
    rng = np.random.default_rng(0)
    F, N, n = 200, 1500, 80
    d = data(rng, n, F, N)
    for kw in (dict(optimizer="lazy_adam", min_active=50, max_active=30),
               dict(optimizer="adam", min_active=40),
               dict(optimizer="lazy_adam", L=300, bucket_capacity=128, min_active=60)):
        base = dict(hidden=128, K=3, L=10, bin_size=8, bucket_capacity=16, lr=1e-3)
        base.update(kw)
        hp = ref.Hyper(**base)
        p = ref.init_params(F, N, hp, rng)
        eng = gpu.SlideGPU(None, hp, p, F, N)
        eng.set_hash(ref.draw_hash(hp, rng), rng.permutation(N))
        eng.rebuild()
        for r0 in (0, 64):
            eng.step(eng.batch(d, r0, min(n, r0 + 64)), rng.integers(0, N, size=min(n, r0 + 64) - r0))
        eng.rebuild()
        eng.hash_codes(cp.asarray(rng.standard_normal((5, 128)).astype(np.float32)))
        eng.predict_topk(d.X, 5, eval_batch=32)
        print(kw, eng.epoch_stats(), "gscratch" if eng.gscratch is not None else "smem")
    hp = ref.Hyper(hidden=128, K=3, L=10, bin_size=8, lr=1e-3)
    dense = gpu.DenseGPU(None, hp, ref.init_params(F, N, hp, rng), F, N)
    dense.step(dense.batch(d, 0, 64), None)
    dense.predict_topk(d.X[:40], 5)
    device.synchronize()
    print("sanitize run done")


if __name__ == "__main__":
    main()
