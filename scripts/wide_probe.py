#!/usr/bin/env python3
"""Ceilings of the wide models' per-edge work on this GPU (``cuda/wide/probe.cu``), on generated
criteo-s-shaped data (ids renumbered by frequency, as the trainers see them).

Each probe makes one pass over the training edges: stream them only (the one-pass floor), gather a
parameter per edge, one atomic per edge (plain, or with the hot rows sharded as the warp design
does), and per run of equal features in feature-major tiles of T rows (what aggregating a tile's
updates before the atomics buys). No training happens; the numbers bound what an epoch can cost.
It also gives the least an epoch can cost at W samples in flight whatever the design
(``staleness_bound``: distinct window-feature pairs and the grid-step exchange chain).
Usage (on a GPU): ``python3 scripts/wide_probe.py [--scale 0.2] [--tiles 32 256 1024 8192]
[--windows 1024 2048 4096] [--hot 64 256] [--skip-edges | --chain-only]``.
"""
import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def tiles_feature_major(X, rows_per_tile: int):
    """Edges of X sorted by (tile of rows, feature): (fid, val), padded to a multiple of 4."""
    rows = np.repeat(np.arange(X.shape[0], dtype=np.int64), np.diff(X.indptr))
    key = (rows // rows_per_tile) * X.shape[1] + X.indices
    o = np.argsort(key, kind="stable")
    return pad4(X.indices[o].astype(np.int32), X.data[o].astype(np.float32))


def pad4(f, x):
    n = -len(f) % 4
    return np.concatenate([f, np.zeros(n, np.int32)]), np.concatenate([x, np.zeros(n, np.float32)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.2)
    ap.add_argument("--tiles", type=int, nargs="*", default=[32, 256, 1024, 8192])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--windows", type=int, nargs="*", default=[1024, 2048, 4096, 16384],
                    help="samples in flight (the staleness bound) for the design-independent bound")
    ap.add_argument("--hot", type=int, nargs="*", default=[256, 4096],
                    help="hot rows a design keeps in shared memory, for the bound")
    ap.add_argument("--chain-only", action="store_true", help="only the grid-step exchange times (no data)")
    ap.add_argument("--skip-edges", action="store_true", help="only the bound, not the per-edge probes")
    ap.add_argument("--copy-gbps", type=float, default=0.0,
                    help="measured copy bandwidth for the 3x-floor line (0: measure it)")
    a = ap.parse_args()
    from pipeline.gpu.device import exit_without_gpu
    exit_without_gpu(Path(__file__).name)
    import cupy as cp
    from pipeline.data.ctr_synth import SHAPES, generate
    from pipeline.gpu import device, kernels
    from pipeline.gpu.timer import time_cuda
    from pipeline.models.wide.gpu import spread_rows
    from pipeline.models.wide.prep import apply_ids, renumber
    info = device.init(0)
    bench = SimpleNamespace(warmup=1, min_repeats=a.reps, max_repeats=a.reps, min_time_ms=0.0)

    def timed(fn):
        t = time_cuda(fn, bench)
        return t.median_ms, t.iqr_ms, t.min_ms

    mod = kernels.load("wide", "probe.cu")
    if a.chain_only:
        for (h, nsh, lag), v in chain_steps(mod.kernel, info.sm_count, [0] + list(a.hot), timed).items():
            print(f"{info.name}: grid step exchanging {h} hot rows, {nsh} shards, lag {lag}: {v:.2f} us")
        return
    if not a.copy_gbps:
        from pipeline.gpu import peaks
        a.copy_gbps = peaks.get(str(ROOT / "outputs" / "cache")).copy_gbps     # the pipeline's cached peaks
    rows0, feats, nnz = SHAPES["criteo_s"]
    X, _ = generate(int(round(rows0 * a.scale)), feats, nnz, 0)
    new, freq = renumber(X)
    X = apply_ids(X, new)
    E = X.nnz
    perm = spread_rows(feats, 256)          # the trainer's spread rows (renumbering packs similar
                                            # frequencies into the same 128-byte lines)
    w = cp.zeros(feats, cp.float32)
    out = cp.zeros(1, cp.float32)
    sm = info.sm_count
    grid, block = (8 * sm,), (256,)

    rows_f, rows_x = pad4(X.indices.astype(np.int32), X.data.astype(np.float32))
    f_dev, x_dev = cp.asarray(rows_f), cp.asarray(rows_x)
    e4 = np.int64(len(rows_f))
    results = []

    def add(name, fn, nedges=E):
        med, iqr, lo = timed(fn)
        results.append((name, med, iqr, lo, nedges / med / 1e6))

    k = mod.kernel
    add("stream f+x (one-pass floor)", lambda: k("p_stream", "PPqP")(grid, block, f_dev, x_dev, e4, out))
    if not a.skip_edges:
        add("gather w[f] per edge", lambda: k("p_gather", "PPqPP")(grid, block, f_dev, x_dev, e4, w, out))
        wsh = cp.zeros(feats * 8, cp.float32)
        for hot, nsh in ((0, 1), (256, 8), (256, 32), (4096, 32)):
            add(f"RED per edge, hot {hot} x {nsh} shards",
                lambda hot=hot, nsh=nsh: k("p_red", "PPqPPii")(grid, block, f_dev, x_dev, e4, w, wsh,
                                                              np.int32(hot), np.int32(nsh)))
        add("gather + RED per edge, 256 x 8 shards",
            lambda: k("p_gather_red", "PPqPPii")(grid, block, f_dev, x_dev, e4, w, wsh, np.int32(256), np.int32(8)))
        cold = X.indices >= 4096
        cf, cx = pad4(X.indices[cold].astype(np.int32), X.data[cold].astype(np.float32))
        cf_dev, cx_dev = cp.asarray(cf), cp.asarray(cx)
        nc = np.int64(len(cf))
        add(f"cold edges only (id >= 4096, {cold.mean():.2f} of all): gather",
            lambda: k("p_gather", "PPqPP")(grid, block, cf_dev, cx_dev, nc, w, out), int(cold.sum()))
        add("cold edges only: RED", lambda: k("p_red", "PPqPPii")(grid, block, cf_dev, cx_dev, nc, w, wsh,
                                                                 np.int32(0), np.int32(1)), int(cold.sum()))
        add("cold edges only: gather + RED", lambda: k("p_gather_red", "PPqPPii")(grid, block, cf_dev, cx_dev, nc, w,
                                                                                wsh, np.int32(0), np.int32(1)),
            int(cold.sum()))
        sf = cp.asarray(perm[rows_f])
        add("ids >= 256 spread over lines: gather + RED, 256 x 8 shards",
            lambda: k("p_gather_red", "PPqPPii")(grid, block, sf, x_dev, e4, w, wsh, np.int32(256), np.int32(8)))
        add("ids >= 256 spread over lines: RED, 256 x 8 shards",
            lambda: k("p_red", "PPqPPii")(grid, block, sf, x_dev, e4, w, wsh, np.int32(256), np.int32(8)))
        warm = X.indices >= 256
        wf, wx = pad4(perm[X.indices[warm]], X.data[warm].astype(np.float32))
        wf_dev, wx_dev = cp.asarray(wf), cp.asarray(wx)
        add(f"ids >= 256 only ({warm.mean():.2f} of all), spread: gather + RED",
            lambda: k("p_gather_red", "PPqPPii")(grid, block, wf_dev, wx_dev, np.int64(len(wf)), w, wsh,
                                                 np.int32(0), np.int32(1)), int(warm.sum()))
        wf0, _ = pad4(X.indices[warm].astype(np.int32), X.data[warm].astype(np.float32))
        wf0_dev = cp.asarray(wf0)
        add("ids >= 256 only, as renumbered: gather + RED",
            lambda: k("p_gather_red", "PPqPPii")(grid, block, wf0_dev, wx_dev, np.int64(len(wf)), w, wsh,
                                                 np.int32(0), np.int32(1)), int(warm.sum()))
        uf = cp.asarray(np.random.default_rng(1).integers(0, feats, len(rows_f)).astype(np.int32))
        add("uniform random ids: gather", lambda: k("p_gather", "PPqPP")(grid, block, uf, x_dev, e4, w, out))
        add("uniform random ids: RED", lambda: k("p_red", "PPqPPii")(grid, block, uf, x_dev, e4, w, wsh,
                                                                    np.int32(0), np.int32(1)))
        for t in a.tiles:
            tf, tx = tiles_feature_major(X, t)
            tf_dev, tx_dev = cp.asarray(tf), cp.asarray(tx)
            m = len(tf) // 32 * 32
            n_runs = int(np.count_nonzero(np.diff(tf[:m].reshape(-1, 32), axis=1)) + m // 32)
            add(f"tile {t} rows: warp-run RED ({n_runs / E:.2f} RED/edge)",
                lambda: k("p_seg_red", "PPqP")(grid, block, tf_dev, tx_dev, np.int64(len(tf)), w))
            add(f"tile {t} rows: warp-run gather + RED",
                lambda: k("p_seg_gather_red", "PPqP")(grid, block, tf_dev, tx_dev, np.int64(len(tf)), w))
    cyc = np.random.default_rng(2).permutation(feats).astype(np.int32)
    nxt = np.empty(feats, np.int32)
    nxt[cyc] = np.roll(cyc, -1)
    nxt_dev, iout = cp.asarray(nxt), cp.zeros(1, cp.int32)
    hops = 20000
    med, _, _ = timed(lambda: k("p_chase", "PiP")((1,), (1,), nxt_dev, np.int32(hops), iout))
    chase_us = med / hops * 1e3
    print(f"\n{info.name}: {X.shape[0]} rows, {E} edges ({E / X.shape[0]:.1f}/row), top 256 features hold "
          f"{freq[:256].sum() / E:.2f} of the edges")
    print("| probe | ms median | IQR | min | M edges/s |")
    print("|---|---|---|---|---|")
    for name, med, iqr, lo, rate in results:
        print(f"| {name} | {med:.3f} | {iqr:.3f} | {lo:.3f} | {rate:.0f} |")
    print(f"dependent L2 load (pointer chase over a 4 MB array, one thread): {chase_us * 1e3:.0f} ns per hop")
    staleness_bound(a, k, X, perm, info, timed, results[0][1])


def window_pairs(X, window: int, hot: int):
    """Features >= hot of each window of `window` consecutive rows, each (window, feature) once."""
    rows = np.repeat(np.arange(X.shape[0], dtype=np.int64), np.diff(X.indptr))
    cold = X.indices >= hot
    key = np.unique((rows[cold] // window) * X.shape[1] + X.indices[cold])
    return (key % X.shape[1]).astype(np.int32)


def chain_steps(k, sm, hots, timed, steps=4000):
    """us per grid-wide step exchanging H hot rows (p_chain), by (H, shards, lag)."""
    import cupy as cp
    counter = cp.zeros(2, cp.uint32)                 # arrivals; [1]: a block gave up waiting (p_chain)
    out = {}
    for h in hots:
        for nsh in ((1,) if h == 0 else (1, 8)):
            hot = cp.zeros(max(h, 1) * nsh, cp.float32)
            for lag in (0, 1):
                def chain(h=h, nsh=nsh, lag=lag, hot=hot):
                    counter[:1].fill(0)
                    k("p_chain", "iiPiiP")((sm,), (256,), np.int32(steps), np.int32(lag), hot, np.int32(h),
                                           np.int32(nsh), counter)
                out[h, nsh, lag] = timed(chain)[0] / steps * 1e3
    if int(counter[1].get()):
        raise SystemExit("wide_probe: p_chain's blocks were not all resident (a CUDA tool attached, or another "
                         "process on the GPU): run it alone on the GPU")
    return out


def staleness_bound(a, k, X, perm, info, timed, stream_ms):
    """The least an epoch can cost with at most W samples in flight, whatever the kernel design.

    With at most W samples in flight, a sample's forward must read every parameter after the
    updates of the samples more than W before it, so a parameter read (and a parameter update) can
    serve at most the samples of one window of W. Two parts, each a lower bound on its own:
    - memory: one L2 gather + one RED per distinct (window, feature) pair for the features past
      the H hot ones (those a design keeps in shared memory for free); rows spread over lines;
    - chain: n / W dependent steps, each at least an exchange of the H hot rows through L2 and a
      grid-wide publication (p_chain; lag 1 lets two half-windows overlap, i.e. 2 n / W steps).
    bound = max(stream floor, memory, chain). Where it exceeds 3x the one-pass floor, no kernel
    reaches 3x the floor at that staleness on this GPU.
    """
    import cupy as cp
    n, E = X.shape[0], X.nnz
    sm = info.sm_count
    w = cp.zeros(X.shape[1], cp.float32)
    wsh = cp.zeros(1, cp.float32)
    step_us = chain_steps(k, sm, [0] + list(a.hot), timed)
    floor3 = 3 * E * 12 / (a.copy_gbps * 1e9) * 1e3 if a.copy_gbps else None
    print(f"\nDesign-independent bound at W samples in flight ({n} rows, {E} edges; stream floor "
          f"{stream_ms:.3f} ms)")
    print("grid step (us) exchanging H hot rows, by shards x lag: " + "; ".join(
        f"H={h} {nsh}x lag {lag}: {v:.2f}" for (h, nsh, lag), v in step_us.items()))
    if floor3:
        print(f"3x the one-pass floor (12 B an edge at {a.copy_gbps:.0f} GB/s): {floor3:.3f} ms")
    print("| W in flight | samples/SM | H hot | pairs/edge | memory ms | steps | chain ms | bound ms |")
    print("|---|---|---|---|---|---|---|---|")
    for W in a.windows:
        for h in a.hot:
            pf = perm[window_pairs(X, W, h)]
            pf, px = pad4(pf, np.ones(len(pf), np.float32))
            pf_dev, px_dev = cp.asarray(pf), cp.asarray(px)
            mem, _, _ = timed(lambda: k("p_gather_red", "PPqPPii")((8 * sm,), (256,), pf_dev, px_dev,
                                                                   np.int64(len(pf)), w, wsh, np.int32(0),
                                                                   np.int32(1)))
            st = -(-n // W)
            chain_ms = min((st if lag == 0 else 2 * st) * v for (hh, _, lag), v in step_us.items()
                           if hh == h) / 1e3
            bound = max(stream_ms, mem, chain_ms)
            print(f"| {W} | {W / sm:.1f} | {h} | {len(pf) / E:.3f} | {mem:.3f} | {st} | {chain_ms:.3f} | "
                  f"{bound:.3f} |", flush=True)


if __name__ == "__main__":
    main()
