#!/usr/bin/env python3
"""The wide models at the full criteo-s shape (``dataset=ctr_synth dataset.scale=1.0``, 4.62 M
training rows, 10^6 features, batch 1024): LR flow at the paper's semantics and the other flow
settings (optimiser, mini-batches in flight) with stage in the same run (the target loss of time to
quality: stage's final validation loss + 0.003), FM k=10 against stage, and out of core at a device
budget of a quarter of the training data against design=chunk in memory.

Each setting is one ``python -m pipeline`` run (its log in ``--out``); a line per variant is
printed: GPU ms an epoch, x_vs_stage, x_of_floor, x_of_step_bound, validation loss, epochs and GPU
seconds to the target, overlap. ``--budget-s`` stops starting runs after that many seconds (the
generated data is cached in ``--cache``, so a later call with ``--only`` goes on from there).
Usage (on a GPU): ``python3 scripts/wide_fullshape.py [--only lr_paper lr_ada_w4] [--list]``.
"""
import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["dataset=ctr_synth", "dataset.scale=1.0", "batch_size=1024", "backend=cuda", "progress=false",
          "model.early_stop=false"]
LR8 = ["model=wide_lr", "epochs=8", "model.baselines=[stage]"]
RUNS = {
    "lr_paper": LR8,                                                          # 2 mini-batches in flight, SGD
    "lr_ada_w4": LR8 + ["model.optimizer=adagrad", "model.inflight_batches=4"],
    "fm": ["model=wide_fm", "model.k=10", "epochs=3", "model.baselines=[stage]", "model.hot=256"],  # LR's cache
    "lr_ooc": ["model=wide_lr", "epochs=3", "model.baselines=[]", "model.device_budget_mb=522"],
    "lr_chunk_mem": ["model=wide_lr", "epochs=3", "model.baselines=[]", "model.design=chunk"],
    "lr_ada_w2": LR8 + ["model.optimizer=adagrad", "model.inflight_batches=2"],
    "lr_ada_w8": LR8 + ["model.optimizer=adagrad", "model.inflight_batches=8"],
    "lr_sgd_w4": LR8 + ["model.inflight_batches=4"],
    "lr_ada_w16": LR8 + ["model.optimizer=adagrad", "model.inflight_batches=16"],
    "lr_ada_w1": LR8 + ["model.optimizer=adagrad", "model.inflight_batches=1"],
}
SHOW = ("gpu_ms", "x_vs_stage", "x_of_floor", "x_of_step_bound", "step_bound_ms", "in_flight", "val_loss",
        "to_target_epochs", "to_target_gpu_s", "to_target_s", "overlap", "epochs")


def parse_table(text: str):
    """Rows of the results table a run prints (columns separated by two or more spaces)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("variant ") and i + 1 < len(lines) and lines[i + 1].startswith("---"):
            spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[i + 1])]
            cols = [line[a:b + 2].strip() for a, b in spans]
            rows = []
            for row in lines[i + 2:]:
                if not row.strip() or row.startswith(("[", "FAIL", "failures")):
                    break
                vals = [row[a:(spans[j + 1][0] if j + 1 < len(spans) else None)].strip()
                        for j, (a, _) in enumerate(spans)]
                rows.append(dict(zip(cols, vals)))
            return rows
    return []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "outputs" / "wide_fullshape"))
    ap.add_argument("--cache", default=str(ROOT / "outputs" / "cache"))
    ap.add_argument("--budget-s", type=float, default=1e9)
    ap.add_argument("--extra", nargs="*", default=[])
    ap.add_argument("--prepare", action="store_true", help="only generate and preprocess the data into --cache")
    a = ap.parse_args()
    if a.prepare:
        sys.path.insert(0, str(ROOT))
        from hydra import compose, initialize_config_dir
        from pipeline.config import register_all
        from pipeline.models.wide import prep
        register_all()
        with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
            cfg = compose(config_name="config", overrides=["model=wide_lr", *COMMON, f"cache_dir={a.cache}"])
        t = time.time()
        d = prep.prepare(cfg, "full", int(cfg.model.chunk), int(cfg.model.hot))
        print(f"prepared {d.n} train rows, {d.Xtr.nnz} edges, {d.edge_bytes / 2**20:.0f} MiB of chunk edges "
              f"in {time.time() - t:.0f} s", flush=True)
        return
    if a.list:
        for k, v in RUNS.items():
            print(k, " ".join(v))
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    for name in a.only or list(RUNS):
        if time.time() - t0 > a.budget_s:
            print(f"{name}: not started (--budget-s {a.budget_s:g} spent)", flush=True)
            continue
        cmd = [sys.executable, "-m", "pipeline", *RUNS[name], *COMMON, f"cache_dir={a.cache}",
               f"tracking.dir={out / 'mlflow'}", f"hydra.run.dir={out / name}", *a.extra]
        t = time.time()
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        (out / f"{name}.log").write_text(" ".join(cmd) + "\n\n" + r.stdout + "\n" + r.stderr)
        print(f"## {name} (exit {r.returncode}, {time.time() - t:.0f} s): {' '.join(RUNS[name])}", flush=True)
        for line in r.stderr.splitlines():
            if "publication" in line or "out-of-core" in line or "design=warp" in line:
                print("   " + line.strip()[:300])
        for row in parse_table(r.stdout):
            print("   " + row.get("variant", "?") + ": " + ", ".join(f"{k} {row[k]}" for k in SHOW if row.get(k)),
                  flush=True)
        for line in r.stdout.splitlines():
            if "target validation loss" in line or "differs from" in line:
                print("   " + line.strip()[:300])
        if r.returncode not in (0, 1):
            print(r.stderr[-1500:])


if __name__ == "__main__":
    main()
