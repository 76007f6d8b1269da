"""Time one SLIDE training step at the Amazon-670K shape (batch 256, K=6, L=50, N=670,091,
F=135,909) on generated rows, with the phase breakdown, the table rebuild, the dense baselines and
the evaluation of one chunk. Usage (on a GPU machine, from the project root):

    python scripts/slide_bench.py [--steps 50] [--hidden 128] [--json out.json]

Random weights hash the output neurons almost uniformly (about 2.6 a bucket), so the tables
give ~130 candidates a sample and padding fills the set to ``min_active``; ``--active`` runs the
step again with larger padded sets (the ~3,000 a sample of a trained model).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import scipy.sparse as sp

from pipeline.models.slide import reference as ref


class Split:
    def __init__(self, X, Y):
        self.X, self.Y = X, Y


def generate(rng, n, F, N, nnz=76, labels=5.45):
    lens = np.maximum(1, rng.poisson(nnz, n))
    ptr = np.concatenate([[0], np.cumsum(lens)])
    ind = np.concatenate([np.sort(rng.choice(F, size=k, replace=False)) for k in lens]).astype(np.int32)
    X = sp.csr_matrix((rng.random(ind.size).astype(np.float32), ind, ptr), shape=(n, F))
    ll = np.maximum(1, rng.poisson(labels, n))
    zipf = np.minimum(rng.zipf(1.3, size=int(ll.sum())) - 1, N - 1)
    perm = rng.permutation(N)
    rows = []
    o = 0
    for k in ll:
        rows.append(np.unique(perm[zipf[o:o + k]]))
        o += k
    yptr = np.concatenate([[0], np.cumsum([r.size for r in rows])])
    Y = sp.csr_matrix((np.ones(yptr[-1], np.float32), np.concatenate(rows).astype(np.int32), yptr), shape=(n, N))
    return Split(X, Y)


def time_steps(eng, data, B, steps, warm, rng, N):
    import pycuda.driver as drv
    nb = data.X.shape[0] // B
    pads = [rng.integers(0, N, size=B) for _ in range(steps + warm)]
    for i in range(warm):
        eng.step(eng.batch(data, (i % nb) * B, (i % nb + 1) * B), pads[i])
    drv.Context.synchronize()
    eng.phase_times()
    eng.epoch_stats()
    s, e = drv.Event(), drv.Event()
    t0 = time.perf_counter()
    s.record()
    for i in range(steps):
        j = (warm + i) % nb
        eng.step(eng.batch(data, j * B, (j + 1) * B), pads[warm + i])
    e.record()
    host = (time.perf_counter() - t0) * 1e3 / steps
    e.synchronize()
    ms = e.time_since(s) / steps
    ph = {k: v / steps for k, v in eng.phase_times().items()}
    st = eng.epoch_stats()
    return ms, host, ph, st


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warm", type=int, default=8)
    ap.add_argument("--rows", type=int, default=256 * 40)
    ap.add_argument("--active", type=int, default=3000)
    ap.add_argument("--json", default="")
    ap.add_argument("--hidden", type=int, default=128, help="hidden units (model.hidden: a multiple of 32 up to 256)")
    ap.add_argument("--no-dense", action="store_true")
    ap.add_argument("--shape", choices=("amazon", "wiki"), default="amazon",
                    help="wiki: batch 128, K=5, L=350, 1,617,899 features, 325,056 labels (slide only)")
    a = ap.parse_args()
    from pipeline.gpu import device
    info = device.init(0)
    import pycuda.driver as drv
    from pipeline.models.slide import gpu
    wiki = a.shape == "wiki"
    F, N, B = (1_617_899, 325_056, 128) if wiki else (135_909, 670_091, 256)
    K, L = (5, 350) if wiki else (6, 50)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    data = generate(rng, a.rows, F, N, *((42.5, 3.2) if wiki else (76, 5.45)))
    print(f"GPU: {info.name}; generated {a.rows} rows in {time.perf_counter() - t0:.1f} s "
          f"(nnz/row {data.X.nnz / a.rows:.1f}, labels/row {data.Y.nnz / a.rows:.2f})", flush=True)
    out = {"gpu": info.name}
    hp = ref.Hyper(hidden=a.hidden, K=K, L=L, bin_size=8, bucket_capacity=128, min_active=1500,
                   max_active=min(N, L * 128 + int(np.diff(data.Y.indptr).max())), optimizer="lazy_adam")
    p = ref.init_params(F, N, hp, rng)
    eng = gpu.SlideGPU(None, hp, p, F, N)
    eng.set_hash(ref.draw_hash(hp, rng), rng.permutation(N))
    eng.rebuild()
    drv.Context.synchronize()
    eng.phase_times()
    eng.epoch_stats()
    s, e = drv.Event(), drv.Event()
    s.record()
    for _ in range(3):
        eng.rebuild()
    e.record()
    e.synchronize()
    rb = e.time_since(s) / 3
    st = eng.epoch_stats()
    per = 6400 // B
    print(f"shape {a.shape}: batch {B}, K={K}, L={L}, F={F}, N={N}, hidden {a.hidden}", flush=True)
    print(f"rebuild: {rb:.3f} ms ({rb / per:.3f} ms a step at one rebuild per 6,400 samples); "
          f"FIFO dropped {st['table_dropped'] / 3:.0f} inserts a build", flush=True)
    out["rebuild_ms"] = rb
    configs = (("lazy_adam", 1500),) if wiki else (("lazy_adam", 1500), ("lazy_adam", a.active), ("adam", 1500))
    for opt, mina in configs:
        eng.hp.optimizer = opt
        eng.lazy = opt == "lazy_adam"
        eng.hp.min_active = mina
        ms, host, ph, st = time_steps(eng, data, B, a.steps, a.warm, rng, N)
        key = f"slide_{opt}_min{mina}"
        out[key] = dict(step_ms=ms, host_issue_ms=host, phases=ph, active_mean=st["active_mean"],
                        active_max=st["active_max"])
        print(f"{key}: step {ms:.3f} ms (+ rebuild {rb / per:.3f} amortised = {ms + rb / per:.3f}); host issue "
              f"{host:.3f} ms; active mean {st['active_mean']:.0f} max {st['active_max']:.0f}; loss {st['loss']:.4f}; "
              f"query scratch in {'global' if eng.gscratch is not None else 'shared'} memory",
              flush=True)
        print("   " + ", ".join(f"{k} {v:.3f}" for k, v in ph.items()), flush=True)
    if not a.no_dense and not wiki:
        del eng
        import cupy as cp
        cp.get_default_memory_pool().free_all_blocks()
        for prec in ("tf32", "fp32"):
            d = gpu.DenseGPU(None, hp, p, F, N, precision=prec)
            ms, host, ph, st = time_steps(d, data, B, 10, 2, rng, N)
            out[f"dense_{prec}"] = dict(step_ms=ms, phases=ph)
            print(f"dense_{prec}: step {ms:.3f} ms; " + ", ".join(f"{k} {v:.3f}" for k, v in ph.items()), flush=True)
            if prec == "tf32":
                X = data.X[:4096]
                d.predict_topk(X[:64], 5)
                drv.Context.synchronize()
                t0 = time.perf_counter()
                d.predict_topk(X, 5, eval_batch=4096)
                ev = (time.perf_counter() - t0) * 1e3
                out["eval_4096_rows_ms"] = ev
                print(f"evaluation of 4,096 rows over all {N} labels: {ev:.1f} ms", flush=True)
            del d
            cp.get_default_memory_pool().free_all_blocks()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
