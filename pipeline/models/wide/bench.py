"""Epoch-time sweep of the flow kernel on one generated data set (generated once, in one process):
``python -m pipeline.models.wide.bench [scale] [k ...]``. For each chunk size (with one mini-batch
of samples in flight) and for a few in-flight settings it trains 3 epochs of flow (update=chunk)
and prints GPU epoch time and final validation loss beside stage (same data, strict batches)."""
from __future__ import annotations

import sys
import time

import numpy as np
from omegaconf import OmegaConf

from pipeline.models.wide import prep
from pipeline.models.wide import reference as ref


def run(scale: float = 0.2, ks=(0, 10), epochs: int = 3, batch: int = 1024) -> None:
    from pipeline.context import Context
    from pipeline.gpu import device, peaks
    from pipeline.data.ctr_synth import SHAPES, generate
    from pipeline.models.wide import gpu

    info = device.init(0)
    pk = peaks.get("outputs/cache")
    rows, feats, nnz = SHAPES["criteo_s"]
    rows = int(rows * scale)
    t0 = time.perf_counter()
    X, y = generate(rows, feats, nnz, 0)
    nva = rows // 10
    parts = (X[:-nva], y[:-nva], X[-nva:], y[-nva:])
    print(f"# {info.name}: criteo_s x {scale}: {rows} rows, generated in {time.perf_counter() - t0:.1f} s; "
          f"copy {pk.copy_gbps:.0f} GB/s", flush=True)
    print("| model | variant | chunk | inflight | threads | gpu ms/epoch | x floor | val loss | x vs stage |")
    print("|---|---|---|---|---|---|---|---|---|")
    hot = 256
    stage_ms = {}
    cur = None
    for chunk, inflight, threads, variant in ((32, 0, 512, "stage"), (32, 0, 512, "flow"), (32, 0, 256, "flow"),
                                              (16, 0, 256, "flow"), (8, 0, 128, "flow"), (32, 64, 512, "flow")):
        if chunk != cur:
            data = prep.from_arrays(prep.build_arrays(*parts, chunk, hot, 0), chunk, hot)
            cur = chunk
        for k in ks:
            mc = OmegaConf.create(dict(k=k, lr=0.5 if k == 0 else 0.1, batch_size=batch, replicas=4, threads=threads,
                                       blocks_per_sm=4, update="chunk", init_std=0.01, streams=3, inflight=inflight,
                                       hot=hot, chunk=chunk))
            ctx = Context(cfg=OmegaConf.create({"gpu": 0}), backend="cuda", size="full", out_dir=".", device=info,
                          peaks=pk)
            tr = gpu.StageTrainer(data, mc, ctx) if variant == "stage" else gpu.FlowTrainer(data, mc, ctx, 1 << 40)
            tr.set_params(ref.init_params(data.d, k, 0.01, 0))
            ms = [tr.epoch(ref.epoch_order(data.n_chunks, 0, e, True))[1] for e in range(epochs)]
            vl, _ = ref.evaluate(data.Xva, data.yva, tr.params())
            med = float(np.median(ms))
            if variant == "stage":
                stage_ms[k] = med
            floor = data.edge_bytes / pk.bandwidth() * 1e3
            inf = "-" if variant == "stage" else (inflight or batch // chunk)
            print(f"| {'LR' if k == 0 else f'FM k={k}'} | {variant} | {chunk} | {inf} | {threads} | {med:.3f} | "
                  f"{med / floor:.1f} | {vl:.4f} | {stage_ms[k] / med:.1f} |", flush=True)
            del tr

if __name__ == "__main__":
    a = sys.argv[1:]
    run(float(a[0]) if a else 0.2, tuple(int(x) for x in a[1:]) or (0, 10))
