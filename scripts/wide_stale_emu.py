#!/usr/bin/env python3
"""NumPy emulation of flow's bounded staleness (no GPU): LR on generated criteo-s-like data trained
in chunk steps (update=chunk) whose forward reads the parameters without the updates of the last
W mini-batches of chunks (the samples in flight), with SGD (each chunk applies its share of a
mini-batch) or AdaGrad as the warp kernel runs it (the accumulators are current: the kernel's
atomics return them; the bias keeps SGD's step). Strict mini-batch SGD (the stage baseline's
semantics) gives the target: its final validation loss + 0.003. Prints the validation loss after
every epoch and the epochs each setting took to reach the target.

It models staleness only (which delay each update sees), not the GPU's interleaving or speed.
Usage: ``python3 scripts/wide_stale_emu.py [--rows 60000] [--epochs 6] [--settings sgd:0.5:2 adagrad:0.02:4 ...]``
(optimiser:step:mini-batches in flight; 0 in flight = strict mini-batches).
"""
import argparse
import collections
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run(D, opt: str, lr: float, batches: int, epochs: int, batch: int = 1024, sgd_lr: float = 0.5,
        init: float = 0.01, seed: int = 0):
    from pipeline.models.wide import reference as ref
    C = D.chunk
    per = batch // C
    p = ref.init_params(D.d, 0, 0.0, seed).astype(np.float64)
    if batches == 0:                                          # strict mini-batches (stage)
        out = []
        for e in range(epochs):
            ref.train_epoch(D.Xtr, D.ytr, p, ref.epoch_order(D.n_chunks, seed, e, True), C, per, lr)
            out.append(ref.evaluate(D.Xva, D.yva, p)[0])
        return out
    A = ref.init_accumulator(D.d, 0, init) if opt == "adagrad" else None
    lag = batches * per                                       # chunk steps whose updates a forward misses
    q = collections.deque()
    out = []
    for e in range(epochs):
        for c in ref.epoch_order(D.n_chunks, seed, e, True):
            a, b = int(c) * C, min(int(c) * C + C, D.n)
            Xc, cols, pc = ref.compact(D.Xtr[a:b], p)
            if A is not None:
                _, g, sq = ref.step_terms(Xc, D.ytr[a:b], pc)
                A.w[cols] += sq.w                           # current: the kernel's atomics return it
                q.append((cols, -lr * g.w / np.sqrt(A.w[cols]), -sgd_lr / batch * g.b))
            else:
                _, g, _ = ref.loss_and_grad(Xc, D.ytr[a:b], pc)
                s = lr * (b - a) / batch
                q.append((cols, -s * g.w, -s * g.b))
            while len(q) > lag:
                cols_, dw, db = q.popleft()
                p.w[cols_] += dw
                p.b += db
        while q:
            cols_, dw, db = q.popleft()
            p.w[cols_] += dw
            p.b += db
        out.append(ref.evaluate(D.Xva, D.yva, p)[0])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=60000)
    ap.add_argument("--features", type=int, default=300000)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--settings", nargs="*",
                    default=["sgd:0.5:0", "sgd:0.5:2", "sgd:0.5:4", "adagrad:0.02:1", "adagrad:0.02:2",
                             "adagrad:0.02:4", "adagrad:0.02:8"])
    a = ap.parse_args()
    from pipeline.data.ctr_synth import SHAPES, generate
    from pipeline.models.wide import prep
    X, y = generate(a.rows, a.features, SHAPES["criteo_s"][2], 0)
    nva = a.rows // 10
    D = prep.from_arrays(prep.build_arrays(X[:-nva], y[:-nva], X[-nva:], y[-nva:], 32, 256, 0), 32, 256)
    print(f"{D.n} train / {nva} val rows, {D.d} features, batch 1024, chunks of 32")
    res = {}
    for s in a.settings:
        opt, lr, w = s.split(":")
        t = time.time()
        res[s] = run(D, opt, float(lr), int(w), a.epochs)
        print(f"{s:>16}: " + " ".join(f"{v:.4f}" for v in res[s]) + f"  ({time.time() - t:.0f} s)", flush=True)
    strict = next((v for k, v in res.items() if k.startswith("sgd:") and k.endswith(":0")), None)
    if strict:
        target = strict[-1] + 0.003
        print(f"target: strict mini-batch SGD's final {strict[-1]:.4f} + 0.003 = {target:.4f}")
        for k, v in res.items():
            e = next((i + 1 for i, x in enumerate(v) if math.isfinite(x) and x <= target), None)
            print(f"{k:>16}: {'epoch ' + str(e) if e else 'not reached'}")


if __name__ == "__main__":
    main()
