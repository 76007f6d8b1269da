#!/usr/bin/env python3
"""Compare flow kernel designs of the wide models on one GPU, each setting against stage in the same run.

    python scripts/wide_sweep.py                 # all settings (about 3-4 minutes on an H200)
    python scripts/wide_sweep.py --quick         # design=chunk and the default design=warp, LR and FM
    python scripts/wide_sweep.py --only lr-warp  # settings whose name contains this
    python scripts/wide_sweep.py --list          # the settings and their knobs

Each setting is one CLI run (``python -m pipeline model=wide_lr dataset=ctr_synth dataset.scale=0.2
epochs=3 batch_size=1024 model.early_stop=false progress=false backend=cuda model.baselines=[stage]
tracking=off <knobs>``; FM k=10 at scale 0.1). One line per setting: flow GPU ms per epoch (median of 3),
x_vs_stage, x_of_floor (flow GPU epoch time over one pass over the training data at the measured copy
bandwidth), us_step (that time over the n / in-flight dependent steps of an epoch), final validation
loss of flow and of stage. The full output of each run is kept under
``outputs/wide_sweep/<setting>.log``. The first LR and the first FM run also generate and cache the data.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LR = ["model=wide_lr", "dataset=ctr_synth", "dataset.scale=0.2"]
FM = ["model=wide_fm", "model.k=10", "dataset=ctr_synth", "dataset.scale=0.1"]
COMMON = ["epochs=3", "batch_size=1024", "model.early_stop=false", "progress=false", "backend=cuda",
          "model.baselines=[stage]", "tracking=off"]


def _in_flight(inflight: int) -> str:
    """Name suffix of chunks (of 32) in flight: none for one mini-batch of 1024."""
    return {16: "-halfbatch", 32: ""}.get(inflight, f"-{inflight // 32}batches")


def warp(model, s, sh, hot=0, hc=0, wpb=0, inflight=32, prefetch=0):
    """A design=warp setting (name, model overrides, knobs): samples per warp, shards (of the ``hot``
    most frequent rows), hot-row cache, warps per block, chunks in flight (32: one mini-batch of
    1024), prefetch (0: the config's default); the rows past the hot ones are spread over the table
    (the trainer always does). Every knob of ``model.warp`` that sets the geometry is passed, so a
    change of the config's defaults does not change what a setting measures; the name is made from
    the knobs."""
    knobs = ["model.design=warp", f"model.warp.samples={s}", f"model.warp.shards={sh}",
             f"model.warp.hot_cache={hc}", f"model.inflight={inflight}"]
    name = f"{model[0]}-warp-s{s}-sh{sh}"
    for key, tag, val in (("shard_hot", "h", hot), (None, "hc", hc), ("warps_per_block", "wpb", wpb),
                          ("prefetch", "pf", prefetch)):
        if val:
            name += f"-{tag}{val}"
            if key:
                knobs.append(f"model.warp.{key}={val}")
    name += _in_flight(inflight)
    return name, model[1], knobs


def chunk(model, inflight=32):
    """The authors' block-per-chunk design."""
    return f"{model[0]}-chunk" + _in_flight(inflight), model[1], ["model.design=chunk", f"model.inflight={inflight}"]


def default(model):
    """The config's defaults."""
    return f"{model[0]}-default", model[1], []


LRM, FMM = ("lr", LR), ("fm", FM)
# every setting keeps one mini-batch (1024 samples) in flight unless its name says otherwise
# (2batches: model.inflight=64 chunks of 32, LR's default)
SETTINGS = [
    default(LRM), default(FMM), chunk(LRM),
    warp(LRM, 1, 8, hot=256), warp(LRM, 1, 1), warp(LRM, 1, 16, hot=1024), warp(LRM, 2, 8, hot=256),
    warp(LRM, 4, 8, hot=256), warp(LRM, 4, 8, hot=64), warp(LRM, 1, 8, hot=256, prefetch=1),
    warp(LRM, 1, 8, hot=256, inflight=16),
    warp(LRM, 4, 8, hot=256, hc=256), warp(LRM, 4, 1, hc=256), warp(LRM, 4, 8, hot=1024, hc=1024),
    warp(LRM, 4, 8, hot=256, hc=256, wpb=4), warp(LRM, 8, 8, hot=256, hc=256),
    warp(LRM, 4, 8, hot=256, hc=256, inflight=256), warp(LRM, 4, 8, hot=256, inflight=256),
    warp(LRM, 4, 8, hot=256, inflight=64),
    warp(LRM, 4, 8, hot=256, hc=256, wpb=4, inflight=64),
    warp(LRM, 4, 8, hot=256, hc=256, wpb=8, inflight=64),
    warp(LRM, 4, 8, hot=1024, hc=1024, wpb=4, inflight=64),
    # the hot rows cached and not sharded: a block reloads HC rows a step instead of HC x shards
    warp(LRM, 4, 1, hc=256, wpb=4, inflight=64), warp(LRM, 4, 1, hc=1024, wpb=4, inflight=64),
    warp(LRM, 4, 1, hc=256, wpb=8, inflight=128),
    warp(LRM, 4, 8, hot=256, hc=256, wpb=8, inflight=128),
    chunk(FMM),
    warp(FMM, 1, 4, hot=32), warp(FMM, 1, 1), warp(FMM, 1, 8, hot=16), warp(FMM, 2, 4, hot=32),
    warp(FMM, 4, 4, hot=32), warp(FMM, 4, 4, hot=32, hc=32),
    warp(FMM, 4, 4, hot=32, hc=32, wpb=4, inflight=64), warp(FMM, 4, 4, hot=32, inflight=64),
    warp(FMM, 4, 4, hot=128, hc=128),
]
assert len({name for name, _, _ in SETTINGS}) == len(SETTINGS), "two settings of one name"
QUICK = ("lr-chunk", "lr-warp-s1-sh8-h256", "fm-chunk", "fm-warp-s1-sh4-h32")


def parse_table(stdout: str):
    """Rows (dicts) of the results table the CLI prints (header 'variant kind ...', a dashes line,
    then one whitespace-separated row per variant; missing cells are '-')."""
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("variant ") and i + 1 < len(lines) and set(lines[i + 1].replace(" ", "")) == {"-"}:
            cols = line.split()
            rows = []
            for row in lines[i + 2:]:
                cells = row.split()
                if len(cells) != len(cols):
                    break
                rows.append(dict(zip(cols, cells)))
            return rows
    return []


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def run_one(name, model_ov, knobs, log_dir: Path, timeout: int):
    cmd = [sys.executable, "-m", "pipeline", *model_ov, *COMMON, *knobs]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), \
            f"timed out after {timeout} s", 124
    wall = time.perf_counter() - t0
    (log_dir / f"{name}.log").write_text(f"$ {' '.join(cmd)}\n# rc={rc} wall={wall:.1f}s\n{out}\n--- stderr\n{err}")
    rows = {r["variant"]: r for r in parse_table(out)}
    flow, stage = rows.get("flow", {}), rows.get("stage", {})
    design = re.search(r"flow design=warp: (.*)", err)
    return dict(name=name, rc=rc, wall=wall, flow_ms=num(flow.get("gpu_ms")), x_vs_stage=num(flow.get("x_vs_stage")),
                x_of_floor=num(flow.get("x_of_floor")), us_step=num(flow.get("us_per_step")),
                val=num(flow.get("val_loss")),
                train=num(flow.get("train_loss")), stage_ms=num(stage.get("gpu_ms")),
                stage_val=num(stage.get("val_loss")), design=design.group(1) if design else "",
                err=err.strip().splitlines()[-1] if rc != 0 and err.strip() else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only " + ", ".join(QUICK))
    ap.add_argument("--only", default="", help="settings whose name contains this")
    ap.add_argument("--list", action="store_true", help="print the settings and exit")
    ap.add_argument("--timeout", type=int, default=180, help="seconds per run")
    ap.add_argument("--extra", action="append", default=[], help="an override added to every run (repeatable)")
    args = ap.parse_args()
    todo = [s for s in SETTINGS if (not args.quick or s[0] in QUICK) and args.only in s[0]]
    if args.list:
        for name, mo, kn in todo:
            print(f"{name:28s} {' '.join(mo + kn)}")
        return 0
    log_dir = ROOT / "outputs" / "wide_sweep"
    log_dir.mkdir(parents=True, exist_ok=True)
    head = (f"{'setting':28s} {'flow_ms':>8s} {'x_vs_stage':>10s} {'x_of_floor':>10s} {'us_step':>7s} {'val_loss':>8s} "
            f"{'train':>7s} {'stage_ms':>8s} {'stage_val':>9s} {'wall_s':>6s}")
    print(head, flush=True)
    t0 = time.perf_counter()
    failed = 0
    for name, mo, kn in todo:
        r = run_one(name, mo, kn + args.extra, log_dir, args.timeout)
        print(f"{name:28s} {r['flow_ms']:8.3f} {r['x_vs_stage']:10.1f} {r['x_of_floor']:10.1f} {r['us_step']:7.2f} {r['val']:8.4f} "
              f"{r['train']:7.4f} {r['stage_ms']:8.2f} {r['stage_val']:9.4f} {r['wall']:6.1f}"
              + (f"  [rc={r['rc']}: {r['err']}]" if r["rc"] else ""), flush=True)
        if r["design"]:
            print(f"{'':28s}   {r['design']}", flush=True)
        failed += r["rc"] != 0
    print(f"# {len(todo)} settings in {time.perf_counter() - t0:.0f} s; logs in {log_dir}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
