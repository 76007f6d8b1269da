#!/usr/bin/env python3
"""The GPU side in one command: GPU tests, every model's benchmarks, compute-sanitizer, and the
regenerated docs/gpu-results.md. Run on a machine with an NVIDIA GPU, from the project root:

    python3 scripts/gpu_suite.py run --out outputs/gpu-suite

Parts (``--parts tests,bench,sanitize``) and models (``--models bcm,sparse_dnn``) can be chosen, so
the work can be split over several calls. The runs of the bench and sanitize parts are listed in
``conf/suite/<model package>.yaml`` (``bench:`` and ``sanitize:``, one ``python -m pipeline`` run an
entry, its overrides as typed); ``--suite FILE`` runs another file of that shape, and ``list`` prints
the commands:

    python3 scripts/gpu_suite.py list --models bcm_cnn
    python3 scripts/gpu_suite.py run --parts bench --suite my-runs.yaml

``--bench-pick`` / ``--sanitize-pick`` take some of a list by the numbers ``list`` prints ('1,14-17'),
``--sanitize-tools memcheck`` one compute-sanitizer tool (default: memcheck and racecheck).
Each part writes one JSON record named by date, GPU, commit and part
(``2026-11-21T1347Z_H200_25f6c38_bench.json``); records worth keeping go to ``docs/gpu-runs/``.
``render`` rebuilds docs/gpu-results.md from any number of records, and the README's results table
(between ``<!-- results:start -->`` and ``<!-- results:end -->``) from the headline measure of each
model (``HEADLINES``):

    python3 scripts/gpu_suite.py render docs/gpu-runs/*.json
    python3 scripts/gpu_suite.py rename docs/gpu-runs/*.json      # records of other names

``table`` prints one Markdown table from records, for the model docs: a pivot (a line per index
tuple, a column per variant) or ``--rows`` (a line per record row), then the records' names, GPU and
commits. A doc's table carries its command in the comment right above it; ``--check-docs`` re-runs
every such command in docs/models/*.md and fails where the table differs (``--update-docs`` rewrites):

    <!-- generated: python3 scripts/gpu_suite.py table docs/gpu-runs/A.json docs/gpu-runs/B.json --experiment softmax_topn --index L,N --variants topn_bucket,torch_topk --value median_ms --scale 1000 --unit µs --extra 'topn_bucket:x_vs_torch_topk:bucket x torch' -->
    python3 scripts/gpu_suite.py table --check-docs

Before and after a change, on one machine in one command: unpack the older commit beside the project
(``git archive <commit> | tar -x -C /tmp/before; echo <commit> > /tmp/before/COMMIT``), run the same
runs there with ``--tree /tmp/before --tag before`` and here with ``--tag after``; ``render`` then
compares the two records row by row (``conf/suite/extra/harness_before_after.yaml`` is such a list).

Stopped by SIGTERM or SIGINT (a `timeout` around the command, say), the script gives the running
child SIGINT (pytest still writes its report; a run is marked killed), writes the record of the part
in progress with what finished, marked ``interrupted``, runs no further part and exits non-zero.
It also exits non-zero, after writing every record, when a test failed, a benchmark run did not
finish or a sanitizer run found errors (one line says which).

Benchmarks run through the CLI (``python -m pipeline <overrides>``) with a private MLflow store, and
their results are read back from it, so what is recorded is exactly what a user's run logs.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def gpu_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        return out.splitlines()[0] if out else "unknown GPU"
    except Exception:
        return "no nvidia-smi"


def suites(args) -> Dict[str, Any]:
    """The run lists: ``--suite`` files when given, else ``conf/suite/*.yaml`` (``--models`` of them)."""
    from pipeline import suite
    from pipeline.errors import ConfigError
    try:
        if getattr(args, "suite", None):
            return {s.name: s for s in map(suite.load, args.suite)}
        return suite.load_all(args.models)
    except (ConfigError, OSError) as e:
        raise SystemExit(f"error: {e}")


def pick(items: List[Any], spec: str) -> List[Any]:
    """The items numbered in ``spec`` ("1,14-17": 1-based, as ``list`` and the suite files number
    them; '' = all), in the file's order."""
    if not spec.strip():
        return list(items)
    want = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise SystemExit(f"error: run numbers {spec!r}: write numbers and ranges from 1, e.g. '1,14-17'")
        if not 1 <= a <= b:
            raise SystemExit(f"error: run numbers {spec!r}: a range {part.strip()!r} must go up from 1")
        want.update(range(a, b + 1))
    return [x for i, x in enumerate(items, 1) if i in want]


def log(msg: str) -> None:
    print(f"[gpu_suite {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------------- parts

def part_tests(out: Path, args) -> Dict[str, Any]:
    xml = out / "pytest-gpu.xml"
    import importlib.util
    per_test = ["--timeout", "300"] if importlib.util.find_spec("pytest_timeout") else []   # (pytest-timeout)
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
           *per_test] + (args.pytest_args or [])
    log("pytest: " + " ".join(cmd[2:]))
    t0 = time.time()
    rc, text = _run(cmd, 3000)
    tail = text[-4000:]
    print(tail, flush=True)
    tests = []
    if xml.is_file():
        import xml.etree.ElementTree as ET
        for tc in ET.parse(xml).getroot().iter("testcase"):
            outcome = "passed"
            msg = ""
            for tag in ("failure", "error", "skipped"):
                el = tc.find(tag)
                if el is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    msg = (el.get("message") or "")[:300]
            tests.append({"id": f"{tc.get('classname')}::{tc.get('name')}", "outcome": outcome,
                          "seconds": float(tc.get("time") or 0), "message": msg})
    return {"rc": rc, "seconds": time.time() - t0, "tests": tests,
            "summary": _pytest_summary(tail) or _count_summary(tests)}


def _pytest_summary(text: str) -> str:
    lines = [l for l in text.splitlines() if re.search(r"\d+ (passed|failed|error)", l)]
    return lines[-1].strip("= ") if lines else ""


def _count_summary(tests: List[Dict[str, Any]]) -> str:
    """The outcome counts of the JUnit report, pytest's way ("1 failed, 7 passed"), where pytest
    printed no summary line (`-qq` among the pytest arguments, or stopped before it)."""
    n = {o: sum(t["outcome"] == o for t in tests) for o in ("failed", "error", "passed", "skipped")}
    return ", ".join(f"{v} {o}" for o, v in n.items() if v)


class Interrupted(Exception):
    """SIGTERM or SIGINT while a child runs (e.g. the `timeout` a device command is wrapped in)."""


_STOP = {"why": "", "in_child": False}
GRACE_S = 20      # seconds a child gets after SIGINT to end cleanly (pytest writes its report, a run is marked)


def _on_signal(signum, frame):
    """Stop after the current child: record what was measured so far instead of losing the part."""
    _STOP["why"] = f"stopped by signal {signum}"
    if _STOP["in_child"]:
        raise Interrupted(_STOP["why"])


def _run(cmd: List[str], timeout: int, tree: Optional[Path] = None, env: Optional[Dict[str, str]] = None):
    """(exit code, stdout + stderr) of ``cmd`` run from the project root (or from ``tree``, another
    checkout, with its own ``pipeline`` package first on the import path); 124 on timeout, 130 when
    this script is stopped meanwhile. Either way the child first gets SIGINT and ``GRACE_S`` seconds
    to end cleanly (pytest then still writes its JUnit report), then SIGKILL. ``env``: variables added
    to this process's environment for the child."""
    env = dict(os.environ, **(env or {}))
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(tree)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != ROOT])
    if _STOP["why"]:
        return 130, _STOP["why"]
    p = subprocess.Popen(cmd, cwd=tree or ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    _STOP["in_child"] = True
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except (subprocess.TimeoutExpired, Interrupted) as e:
        _STOP["in_child"] = False
        p.send_signal(signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        if isinstance(e, Interrupted):
            return 130, f"{e}\n" + (out or "")
        return 124, f"timed out after {timeout} s\n" + (out or "")[-2000:]
    finally:
        _STOP["in_child"] = False


def _read_runs(store: Path) -> List[Dict[str, Any]]:
    import mlflow
    from mlflow.tracking import MlflowClient
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    client = MlflowClient()
    out = []
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"]):
            rows = []
            try:
                path = client.download_artifacts(run.info.run_id, "results.csv", tempfile.mkdtemp())
                import csv
                with open(path) as f:
                    rows = list(csv.DictReader(f))
            except Exception:
                pass
            out.append({"experiment": exp.name, "run": run.info.run_name, "status": run.info.status,
                        "metrics": {k: v for k, v in run.data.metrics.items()
                                    if k.startswith(("summary/", "device/", "stage_seconds/")) or "/" not in k},
                        "tags": {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
                        "rows": rows})
    return out


def part_bench(out: Path, args) -> Dict[str, Any]:
    store = Path(tempfile.mkdtemp(prefix="suite-mlflow-"))
    jobs = []
    plan = [(name, ov) for name, s in suites(args).items() for ov in pick(s.bench, args.bench_pick)]
    if args.extra:   # explicit runs instead of the suite files' bench lists
        import shlex
        plan = [("extra", shlex.split(e)) for e in args.extra]
    for name, overrides in plan:
        cmd = [sys.executable, "-m", "pipeline", *overrides, f"tracking.dir={store}", "progress=false",
               "backend=cuda", f"hydra.run.dir={store}/runs/{len(jobs)}"]
        log(f"bench {name}: {' '.join(overrides)}")
        t0 = time.time()
        rc, text = _run(cmd, args.bench_timeout, args.tree)
        print(text[-3000:], flush=True)
        errors = [l for l in text.splitlines() if l.startswith("error:") or "Error" in l][-3:]
        jobs.append({"model": name, "overrides": overrides, "rc": rc, "seconds": time.time() - t0,
                     "errors": errors})
        if _STOP["why"]:
            break
    runs = _read_runs(store)
    return {"jobs": jobs, "runs": runs}


def part_sanitize(out: Path, args) -> Dict[str, Any]:
    results = []
    for name, s in suites(args).items():
        configs = pick(s.sanitize, args.sanitize_pick)
        for overrides in configs[: args.sanitize_max or None]:
            for tool in sanitize_tools(args.sanitize_tools):
                cmd = ["compute-sanitizer", "--tool", tool, "--print-limit", "20", sys.executable, "-m", "pipeline",
                       *overrides, "tracking.enabled=false", "progress=false", "backend=cuda",
                       "hydra.run.dir=/tmp/suite-sanitize"]
                log(f"sanitize {tool} {name}: {' '.join(overrides)}")
                t0 = time.time()
                rc, text = _run(cmd, args.sanitize_timeout, env={"PIPELINE_CUDA_TOOL": f"compute-sanitizer {tool}"})
                m = re.findall(r"ERROR SUMMARY: (\d+) error", text)
                hazards = re.findall(r"RACECHECK SUMMARY: (\d+) hazard", text)
                errs = int(m[-1]) if m else None
                first = [l for l in text.splitlines() if l.startswith("========= ") and
                         ("Invalid" in l or "hazard" in l.lower() or "Error" in l)][:3]
                results.append({"model": name, "tool": tool, "overrides": overrides, "rc": rc,
                                "errors": errs, "hazards": int(hazards[-1]) if hazards else None,
                                "seconds": time.time() - t0, "first": first,
                                "tail": "" if errs == 0 else text[-800:]})
                print(f"  -> rc={rc} errors={errs}", flush=True)
                if _STOP["why"]:
                    return {"results": results}
    return {"results": results}


SANITIZE_TOOLS = ("memcheck", "racecheck")


def sanitize_tools(spec: str) -> List[str]:
    """compute-sanitizer tools of the sanitize part: a comma-separated subset of SANITIZE_TOOLS, in
    its order ('' = all)."""
    want = [t.strip() for t in spec.split(",") if t.strip()]
    bad = [t for t in want if t not in SANITIZE_TOOLS]
    if bad:
        raise SystemExit(f"--sanitize-tools: {', '.join(bad)}: not one of {', '.join(SANITIZE_TOOLS)}")
    return [t for t in SANITIZE_TOOLS if not want or t in want]


PARTS = {"tests": part_tests, "bench": part_bench, "sanitize": part_sanitize}


def shortfalls(records: List[Dict[str, Any]]) -> List[str]:
    """What of the records did not hold: failed tests, benchmark runs that did not finish, sanitizer
    runs with errors or hazards (the script then exits non-zero, after writing every record)."""
    out = []
    for d in records:
        data = d["data"]
        if d["part"] == "tests" and data.get("rc"):
            out.append(f"tests: {data.get('summary') or 'rc=' + str(data['rc'])}")
        elif d["part"] == "bench":
            bad = [j for j in data["jobs"] if j["rc"] != 0]
            if bad:
                out.append(f"{len(bad)} of {len(data['jobs'])} benchmark runs failed")
        elif d["part"] == "sanitize":
            bad = [r for r in data["results"] if r["errors"] or r.get("hazards") or r["rc"] != 0]
            if bad:
                out.append(f"{len(bad)} of {len(data['results'])} sanitizer runs found errors or did not finish")
    return out


# ---------------------------------------------------------------------------------- render

def _fmt(v: Any) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "" if v is None else str(v)
    if f != f:
        return "nan"
    if f == 0:
        return "0"
    a = abs(f)
    if a >= 1e5 or a < 1e-3:
        return f"{f:.2e}"
    return f"{f:.4g}"


BENCH_COLS = ["case", "variant", "kind", "median_ms", "iqr_ms", "rel_err", "ok", "gbps", "gflops", "pct_peak",
              "ratio_spread", "ratio_unstable"]


def gpu_model(record: Dict[str, Any]) -> str:
    """The GPU's name in a record ("NVIDIA H200, 580.159.04, 143771 MiB" -> "NVIDIA H200")."""
    return str(record.get("gpu", "")).split(",")[0]


def short_gpu(record: Dict[str, Any]) -> str:
    return gpu_model(record).replace("NVIDIA ", "")


ROW_KEYS = ("case", "network", "k", "variant")


def _row_time(row: Dict[str, Any]) -> Optional[Tuple[str, float]]:
    """(column, ms) of the row's time, whichever column its model reports it in (device time first)."""
    from pipeline.headline import TO_MS, row_ms
    for col in TO_MS:
        ms = row_ms(row, col)
        if ms == ms:
            return col, ms
    return None


def before_after(records: List[Dict[str, Any]]) -> List[str]:
    """Markdown comparing bench records tagged ``before`` and ``after`` (``run --tag``) of one GPU
    model, one commit each: every run whose overrides both hold, every row (case, variant) both
    report, its time before and after and their ratio; then the geometric mean and range of the
    ratios. Empty when there is no such pair."""
    import math
    out: List[str] = []
    bench = [d for d in records if d.get("part") == "bench" and d.get("tag") in ("before", "after")]
    for gpu in sorted({gpu_model(d) for d in bench}):
        side = {t: [d for d in bench if gpu_model(d) == gpu and d["tag"] == t] for t in ("before", "after")}
        if not side["before"] or not side["after"]:
            continue
        runs = {t: {} for t in side}
        for t, recs in side.items():
            for d in sorted(recs, key=lambda d: d["date"]):
                for r in d["data"]["runs"]:
                    if r.get("status") == "FINISHED":
                        runs[t][" ".join(sorted(_overrides(r["run"])))] = (d, r)
        table, ratios = [], []
        for key in [k for k in runs["after"] if k in runs["before"]]:
            (_, rb), (_, ra) = runs["before"][key], runs["after"][key]
            rows_b = {tuple(str(x.get(c, "")) for c in ROW_KEYS): x for x in rb["rows"]}
            for row in ra["rows"]:
                k = tuple(str(row.get(c, "")) for c in ROW_KEYS)
                tb, ta = _row_time(rows_b[k]) if k in rows_b else None, _row_time(row)
                if tb is None or ta is None or tb[0] != ta[0]:
                    continue
                ratios.append(ta[1] / tb[1])
                name = " ".join(v for v in k if v)
                table.append(f"| `{ra['run']}` | {name} | {ta[0]} | {_fmt(tb[1])} | {_fmt(ta[1])} | {ta[1] / tb[1]:.3f} |")
        if not table:
            continue
        commits = lambda t: ", ".join(sorted({str(d.get("commit")) for d in side[t]}))
        gmean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        out += [f"## Before and after ({gpu}: commit `{commits('before')}` against `{commits('after')}`)", "",
                "The same runs of both commits on one machine, one after the other (`gpu_suite.py run --tree` "
                "for the older checkout, `--tag before` / `--tag after`); times in ms, ratio = after / before "
                "(below 1: faster now).", "",
                f"{len(ratios)} rows: geometric mean of after / before {gmean:.3f}, range {min(ratios):.3f} to "
                f"{max(ratios):.3f}.", "",
                "| run | row | column | before ms | after ms | after / before |", "|---|---|---|---|---|---|"] + table + [""]
    return out


def render(files: List[Path]) -> str:
    parts: Dict[str, List[Dict[str, Any]]] = {}
    for f in files:
        d = json.loads(Path(f).read_text())
        parts.setdefault(d["part"], []).append(d)
    compared = before_after(parts.get("bench", []))
    # A newer record supersedes an older one of the same GPU model: each test (node id), benchmark run
    # (same experiment and overrides) and sanitizer check is shown from its latest record per GPU.
    for recs in parts.values():
        recs.sort(key=lambda d: d["date"])
    seen_ids: set = set()
    for d in reversed(parts.get("tests", [])):
        ids = {(gpu_model(d), x["id"]) for x in d["data"]["tests"]}
        kept = [x for x in d["data"]["tests"] if (gpu_model(d), x["id"]) not in seen_ids]
        gone = len(d["data"]["tests"]) - len(kept)
        summary = d["data"].get("summary")
        if gone and kept and summary:
            summary += f"; {gone} of these shown from a later run"
        d["data"] = dict(d["data"], tests=kept, summary=summary)
        seen_ids |= ids
    parts["tests"] = [d for d in parts.get("tests", []) if d["data"]["tests"]]
    seen_runs: set = set()
    for d in reversed(parts.get("bench", [])):
        keep_runs = [r for r in d["data"]["runs"] if (gpu_model(d), r["experiment"], r["run"]) not in seen_runs]
        seen_runs |= {(gpu_model(d), r["experiment"], r["run"]) for r in d["data"]["runs"]}
        keep_jobs = [j for j in d["data"]["jobs"] if any(r["run"].startswith(" ".join(j["overrides"])) for r in keep_runs)]
        d["data"] = {"jobs": keep_jobs, "runs": keep_runs, "interrupted": d["data"].get("interrupted", "")}
    parts["bench"] = [d for d in parts.get("bench", []) if d["data"]["runs"] or d["data"]["jobs"]]
    seen_checks: set = set()
    for d in reversed(parts.get("sanitize", [])):
        keys = [(gpu_model(d), x["model"], x["tool"], tuple(x["overrides"])) for x in d["data"]["results"]]
        d["data"] = dict(d["data"], results=[x for x, k in zip(d["data"]["results"], keys) if k not in seen_checks])
        seen_checks |= set(keys)
    parts["sanitize"] = [d for d in parts.get("sanitize", []) if d["data"]["results"]]
    lines = ["# GPU results", "",
             "Generated by `scripts/gpu_suite.py` from the JSON records in `docs/gpu-runs/` (not typed by hand).",
             "Times are medians of CUDA-event-timed repeats after warm-up; the variants of a case are timed",
             "together, round by round, and a ratio is the median of the per-round ratios of baseline time",
             "to variant time (older records: baseline median over variant median, from the same run);",
             "`pct_peak` is the variant's floor (bytes at the measured copy bandwidth, or flops at the",
             "measured fp32/TF32 GEMM rate, whichever is larger) over its time.", ""]
    seen = set()
    for d in sorted(sum(parts.values(), []), key=lambda d: d.get("date", "")):
        key = (d.get("gpu"), d.get("date"))
        if key not in seen:
            seen.add(key)
            lines.append(f"- {d.get('date')}: {d.get('gpu')}, commit `{d.get('commit', '?')}`")
    lines.append("")
    head = []
    for d in parts.get("tests", []):
        head.append(f"| {short_gpu(d)} | GPU tests | `pytest -m gpu` | {d['data'].get('summary')} |")
    for d in parts.get("bench", []):
        for r in d["data"]["runs"]:
            summ = {k[8:]: v for k, v in r["metrics"].items() if k.startswith("summary/") and k != "summary/objective"}
            keys = [k for k in summ if "best_x_vs" in k or "x_vs" in k or "acc" in k or "rate" in k][:6] or list(summ)[:6]
            head.append(f"| {short_gpu(d)} | {r['experiment']} | `{r['run']}` | {r['status']}: " + ", ".join(f"{k} {_fmt(summ[k])}" for k in keys) + " |")
    for d in parts.get("sanitize", []):
        for x in d["data"]["results"]:
            e = f"{x['errors']} errors" if x["errors"] is not None else f"{x.get('hazards')} hazards"
            cfg = " ".join(o for o in x["overrides"] if not o.startswith(("bench.", "tracking.", "size=")))
            head.append(f"| {short_gpu(d)} | compute-sanitizer | {x['model']} {x['tool']}: `{cfg}` | {e}, exit {x['rc']} |")
    if head:
        lines += ["## At a glance", "", "| GPU | what | run | result |", "|---|---|---|---|"] + head + [""]
    lines += compared
    for d in parts.get("tests", []):
        t = d["data"]
        lines += [f"## GPU tests ({d['date']}, {d['gpu']})", "", f"`pytest -m gpu`: **{t.get('summary') or 'rc=' + str(t['rc'])}**"
                  + (f" ({t['interrupted']}: the tests that finished before it)" if t.get("interrupted") else ""), ""]
        bad = [x for x in t["tests"] if x["outcome"] in ("failed", "error")]
        by_file: Dict[str, List[int]] = {}
        for x in t["tests"]:
            c = by_file.setdefault(x["id"].split("::")[0], [0, 0, 0])
            c[0 if x["outcome"] == "passed" else 1 if x["outcome"] in ("failed", "error") else 2] += 1
        lines += ["| test module | passed | failed | skipped |", "|---|---|---|---|"]
        lines += [f"| {k} | {v[0]} | {v[1]} | {v[2]} |" for k, v in sorted(by_file.items())]
        if bad:
            lines += ["", "Failures:", ""] + [f"- `{x['id']}`: {x['message'][:200]}" for x in bad[:30]]
        lines.append("")
    for d in parts.get("bench", []):
        b = d["data"]
        lines += [f"## Benchmarks ({d['date']}, {d['gpu']})", ""]
        if d["data"].get("interrupted"):
            lines += [f"{d['data']['interrupted']}: the runs that finished before it.", ""]
        for j in b["jobs"]:
            status = "ok" if j["rc"] == 0 else f"**exit {j['rc']}**"
            lines.append(f"- `python -m pipeline {' '.join(j['overrides'])}`: {status}, {j['seconds']:.0f} s"
                         + (f" — {'; '.join(j['errors'])[:300]}" if j["rc"] and j["errors"] else ""))
        lines.append("")
        for r in b["runs"]:
            lines += [f"### {r['experiment']}: `{r['run']}` ({r['status']})", ""]
            dev = {k.split('/', 1)[1]: v for k, v in r["metrics"].items() if k.startswith("device/")}
            if dev:
                lines.append("Measured ceilings: " + ", ".join(f"{k} {_fmt(v)}" for k, v in sorted(dev.items())))
                lines.append("")
            rows = r["rows"]
            if rows:
                extra = [c for c in rows[0] if c.startswith("x_vs_")]
                cols = [c for c in BENCH_COLS if c in rows[0]] + extra
                if not any(c in rows[0] for c in ("median_ms",)):
                    cols = list(rows[0].keys())
                lines += ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
                for row in rows:
                    lines.append("| " + " | ".join(_fmt(row.get(c)) if c not in ("case", "variant", "kind", "ok", "ratio_unstable")
                                                    else str(row.get(c, "")) for c in cols) + " |")
                lines.append("")
            summ = {k: v for k, v in r["metrics"].items() if k.startswith("summary/")}
            if summ:
                lines += ["Summary: " + ", ".join(f"{k[8:]} = {_fmt(v)}" for k, v in sorted(summ.items())), ""]
    for d in parts.get("sanitize", []):
        lines += [f"## compute-sanitizer ({d['date']}, {d['gpu']})", "",
                  "| model | tool | run | errors / hazards | exit |", "|---|---|---|---|---|"]
        for s in d["data"]["results"]:
            e = (s["errors"] if s["errors"] is not None else
                 f"{s['hazards']} hazards" if s.get("hazards") is not None else "no summary")
            lines.append(f"| {s['model']} | {s['tool']} | `{' '.join(s['overrides'])}` | {e} | {s['rc']} |")
        for s in d["data"]["results"]:
            if s["errors"]:
                lines += ["", f"{s['model']} {s['tool']}: " + " / ".join(s["first"])[:500]]
        lines.append("")
    return "\n".join(lines) + "\n"

# ------------------------------------------------------------ tables of the model docs (`table`)

GENERATED = "<!-- generated: "
TABLE_CMD = "python3 scripts/gpu_suite.py table"


def _record_path(f: Any) -> Path:
    p = Path(f)
    return p if p.is_absolute() or p.exists() else ROOT / p


def _sort_key(v: str) -> Tuple[int, Any]:
    n = _number(v)
    return (0, n) if n is not None else (1, v)


def _cell(row: Dict[str, Any], col: str, scale: float = 1.0, decimals: Optional[Dict[str, int]] = None) -> str:
    v = row.get(col)
    n = _number(v)
    d = (decimals or {}).get(col, (decimals or {}).get(""))
    if n is None:
        text = _fmt(v)
    elif d is not None:
        text = f"{n * scale:.{d}f}"
    else:
        text = _fmt(n * scale)
    return text + (" (failed check)" if str(row.get("ok", "")).lower() == "false" else "")


def doc_table(files: Sequence[Any], experiments: Sequence[str] = (), index: Sequence[str] = (),
              variants: Sequence[str] = (), value: str = "", extras: Sequence[str] = (),
              where: Sequence[str] = (), scale: float = 1.0, unit: str = "", rows_cols: Sequence[str] = (),
              decimals: Sequence[str] = ()) -> str:
    """A Markdown table from the finished runs of ``experiments`` in bench records ``files``, then a
    line naming the records, GPU and commits. Pivot (``index``/``variants``/``value``): one line per
    distinct index tuple (numeric order where numeric), one column per variant holding its ``value``
    (times ``scale``, headed `` `variant` unit``), then ``extras`` (``VARIANT:COLUMN:HEADER``); a later
    file (or run) wins on the same index and variant. Rows (``rows_cols``): one line per record row
    with those columns, led by the overrides that tell the runs apart when there are several.
    ``where``: ``COLUMN=VALUE`` filters on the rows. ``decimals``: ``N`` or ``COLUMN=N`` (the column's
    own wins), numbers printed with N decimals instead of 4 significant digits. Rows that failed their
    check are marked."""
    try:
        dec = {k: int(v) for k, _, v in (d.rpartition("=") for d in decimals)}
    except ValueError:
        raise SystemExit(f"error: --decimals takes N or COLUMN=N, got {list(decimals)}")
    cond = [w.split("=", 1) for w in where]
    if any(len(c) != 2 for c in cond):
        raise SystemExit(f"error: --where takes COLUMN=VALUE, got {list(where)}")
    used: List[Tuple[Path, Dict[str, Any]]] = []
    runs: List[Tuple[Dict[str, Any], List[Dict[str, Any]]]] = []
    for f in map(_record_path, files):
        d = json.loads(f.read_text())
        took = False
        for r in d.get("data", {}).get("runs", []) if d.get("part") == "bench" else []:
            if r.get("status") != "FINISHED" or (experiments and r.get("experiment") not in experiments):
                continue
            rows = [x for x in r.get("rows", []) if all(str(x.get(c, "")) == v for c, v in cond)]
            if rows:
                runs.append((r, rows))
                took = True
        if took:
            used.append((f, d))
    if not runs:
        raise SystemExit(f"error: no finished run of {list(experiments) or 'any experiment'} with such rows in {list(files)}")
    lines: List[str] = []
    tail = ""
    if rows_cols:
        toks = [r.get("run", "").split() for r, _ in runs]
        common = [t for t in toks[0] if all(t in x for x in toks)]
        label = len(runs) > 1
        head = (["run"] if label else []) + list(rows_cols)
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for (r, rows), t in zip(runs, toks):
            own = " ".join(x for x in t if x not in common)
            lead = [f"`{own}`" if own else "(only those of every run)"] if label else []
            for row in rows:
                lines.append("| " + " | ".join(lead + [_cell(row, c, decimals=dec) for c in rows_cols]) + " |")
        if label and common:
            tail = f"; every run: `{' '.join(common)}`"
    else:
        if not (index and variants and value):
            raise SystemExit("error: table needs --index, --variants and --value (or --rows COLUMNS)")
        ex = []
        for e in extras:
            parts = e.split(":", 2)
            if len(parts) != 3:
                raise SystemExit(f"error: --extra takes VARIANT:COLUMN:HEADER, got {e!r}")
            ex.append(parts)
        cells: Dict[Tuple[str, ...], Dict[str, Dict[str, Any]]] = {}
        for _, rows in runs:
            for row in rows:
                if row.get("variant") in variants or any(row.get("variant") == v for v, _, _ in ex):
                    cells.setdefault(tuple(str(row.get(c, "")) for c in index), {})[row["variant"]] = row
        head = list(index) + [f"`{v}` {unit or value}" for v in variants] + [h for _, _, h in ex]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for key in sorted(cells, key=lambda k: tuple(map(_sort_key, k))):
            by = cells[key]
            row = list(key) + [_cell(by[v], value, scale, dec) if v in by else "" for v in variants]
            row += [_cell(by[v], c, decimals=dec) if v in by else "" for v, c, _ in ex]
            lines.append("| " + " | ".join(row) + " |")
    uniq = lambda xs: list(dict.fromkeys(xs))
    lines += ["", "Records: " + ", ".join(f"`{f.name}`" for f, _ in used)
              + "; GPU " + ", ".join(uniq(short_gpu(d) for _, d in used))
              + "; commits " + ", ".join(f"`{c}`" for c in uniq(str(d.get("commit")) for _, d in used)) + tail]
    return "\n".join(lines)


def _table_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", help="bench records (later files win on the same index and variant)")
    p.add_argument("--experiment", default="", help="comma-separated experiments whose runs are read (default: all)")
    p.add_argument("--index", default="", help="comma-separated columns naming a line, e.g. L,N")
    p.add_argument("--variants", default="", help="comma-separated variants, one column each")
    p.add_argument("--value", default="", help="the column each variant's cell shows, e.g. median_ms")
    p.add_argument("--scale", type=float, default=1.0, help="multiply --value by this (1000: ms -> µs)")
    p.add_argument("--unit", default="", help="the unit in the variants' headers (default: the --value column)")
    p.add_argument("--extra", action="append", default=[], help="VARIANT:COLUMN:HEADER, one more column (repeatable)")
    p.add_argument("--where", action="append", default=[], help="COLUMN=VALUE: only such rows (repeatable)")
    p.add_argument("--decimals", action="append", default=[], help="N or COLUMN=N: print numbers (that "
                   "column's) with N decimals instead of 4 significant digits (repeatable)")
    p.add_argument("--rows", default="", help="comma-separated columns: one line per record row instead of the pivot")
    p.add_argument("--check-docs", nargs="*", metavar="DOC", help="re-run every generated table of these docs "
                   "(default: docs/models/*.md) and fail where one differs")
    p.add_argument("--update-docs", nargs="*", metavar="DOC", help="rewrite every generated table of these docs "
                   "(default: docs/models/*.md)")


def table_from_args(a: argparse.Namespace) -> str:
    split = lambda s: [x for x in s.split(",") if x]
    return doc_table(a.files, split(a.experiment), split(a.index), split(a.variants), a.value, a.extra, a.where,
                     a.scale, a.unit, split(a.rows), a.decimals)


def _table_of_command(cmd: str) -> str:
    import shlex
    if not cmd.startswith(TABLE_CMD + " "):
        raise SystemExit(f"error: a generated table's command must start with {TABLE_CMD!r}: {cmd!r}")
    p = argparse.ArgumentParser(prog=TABLE_CMD)
    _table_args(p)
    return table_from_args(p.parse_args(shlex.split(cmd[len(TABLE_CMD):])))


def generated_tables(text: str) -> List[Tuple[int, int, str]]:
    """(first line, line after the end, command) of every generated table of a doc: the lines under a
    ``<!-- generated: python3 scripts/gpu_suite.py table ... -->`` line, through its ``Records:`` line."""
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith(GENERATED) and s.endswith("-->"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("Records: ")), None)
            if end is None:
                raise SystemExit(f"error: line {i + 1}: a generated table without its 'Records:' line")
            out.append((i + 1, end + 1, s[len(GENERATED):-3].strip()))
    return out


def doc_tables(docs: Sequence[Path], update: bool = False) -> List[str]:
    """Re-run the command of every generated table of ``docs``; the tables that differ from their
    command's output (``doc:line``), rewritten in place with ``update``."""
    stale = []
    for doc in docs:
        text = Path(doc).read_text()
        lines = text.split("\n")
        here = []
        for start, end, cmd in reversed(generated_tables(text)):      # from the end: line numbers stay put
            new = _table_of_command(cmd).split("\n")
            if lines[start:end] != new:
                here.append(f"{doc}:{start + 1}")
                lines[start:end] = new
        stale += here[::-1]
        if update and here:
            Path(doc).write_text("\n".join(lines))
    return stale



# ------------------------------------------------------------------ the README's results table

class Headline(NamedTuple):
    """The measure a model is summed up by: which benchmark run (its overrides, as conf/suite or a
    user would pass them; ``progress=``, ``backend=``, ``cache_dir=`` and budgets are ignored), which
    case of it, which column, and whether more is better. Rows of kind ``ours`` compete with rows
    of kind ``baseline`` (``is_baseline`` decides for rows without a kind)."""
    model: str
    measure: str
    run: Sequence[str]
    column: str
    case: Optional[str] = None
    higher_is_better: bool = False
    name_column: str = "variant"
    is_baseline: Optional[Callable[[Dict[str, Any]], bool]] = None
    unit: str = ""
    also: Sequence[Sequence[str]] = ()      # other override sets measuring the same (e.g. fewer baselines)


HEADLINES = [
    Headline("bcm", "FC 8192 -> 4096, batch 128, forward + both gradients, k = 64", ["model=bcm", "experiment=bcm_layers"],
             "median_ms", case="A k=64", unit="ms", also=[["model=bcm", "block_size=64"]]),
    Headline("bcm_cnn", "CIFAR-10 test accuracy after 15 epochs, k = 16", ["experiment=bcm_cifar10_accuracy", "epochs=15"],
             "test_acc_pct", higher_is_better=True, name_column="network",
             is_baseline=lambda r: r.get("network") == "dense", unit="%"),
    Headline("sparse_dnn", "65536 neurons x 1920 layers, 60000 images",
             ["model=sparse_dnn", "dataset=radixnet_65536", "dataset.layers=1920", "dataset.images=60000",
              "model.variants=[pull]", "model.baselines=[cusparse]", "model.repeats=3", "model.warmup=1"],
             "time_s", unit="s"),
    Headline("slide", "GPU time of a training epoch, Amazon-670K shape (generated), batch 256, K = 6, L = 50",
             ["model=slide", "dataset=amazon670k", "batch_size=256", "model.eval_rows=20000", "epochs=1",
              "model.baselines=[dense_tf32]"], "epoch_ms", unit="ms"),
    Headline("slide", "bibtex P@1 after 20 epochs (about 35 of 159 labels active a sample)",
             ["model=slide", "dataset=bibtex", "batch_size=128", "epochs=20", "model.lr=1.0e-3", "model.K=2",
              "model.L=10", "model.min_active=32", "model.bucket_capacity=32", "model.rebuild_every=1024",
              "model.baselines=[dense_tf32,torch]"], "p@1", higher_is_better=True),
    Headline("fewhot", "N-hot lookup, N = 1", ["experiment=argueta_table1"], "median_ms", case="N=1", unit="ms"),
    Headline("softmax_topn", "softmax + top-N, 1024 rows, N = 10", ["experiment=argueta_table2", "model.rows=[1024]"],
             "median_ms", case="L=1024 N=10", unit="ms"),
    Headline("wide_lr", "GPU time of a training epoch, criteo-shaped data (scale 0.2)",
             ["model=wide_lr", "dataset=ctr_synth", "dataset.scale=0.2", "epochs=3", "batch_size=1024",
              "model.baselines=[stage,torch]", "model.early_stop=false"], "gpu_ms", unit="ms",
             also=[["model=wide_lr", "dataset=ctr_synth", "dataset.scale=0.2", "epochs=3", "batch_size=1024",
                    "model.baselines=[stage]", "model.early_stop=false"]]),
    Headline("wide_fm", "GPU time of a training epoch, criteo-shaped data (scale 0.1), k = 10",
             ["model=wide_fm", "dataset=ctr_synth", "dataset.scale=0.1", "epochs=3", "batch_size=1024",
              "model.baselines=[stage]", "model.early_stop=false"], "gpu_ms", unit="ms"),
]

IGNORED_OVERRIDES = ("progress=", "backend=", "cache_dir=", "model.budget_s=", "hydra.", "tracking.")
RESULTS_START, RESULTS_END = "<!-- results:start -->", "<!-- results:end -->"


def _overrides(run_name: str) -> set:
    return {t for t in run_name.split() if not t.startswith(IGNORED_OVERRIDES)}


def _number(v: Any) -> Optional[float]:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None


def _best(rows: List[Dict[str, Any]], h: Headline, baseline: bool) -> Optional[Dict[str, Any]]:
    pick = None
    for r in rows:
        is_base = h.is_baseline(r) if h.is_baseline else r.get("kind") == "baseline"
        if is_base != baseline or (not h.is_baseline and r.get("kind") not in ("ours", "baseline")):
            continue
        if str(r.get("ok", "")).lower() == "false" or (h.case is not None and r.get("case") != h.case):
            continue
        v = _number(r.get(h.column))
        if v is None:
            continue
        if pick is None or (v > pick[0] if h.higher_is_better else v < pick[0]):
            pick = (v, r)
    return None if pick is None else {"value": pick[0], "name": str(pick[1].get(h.name_column, "?"))}


def results_rows(records: List[Dict[str, Any]], headlines: Sequence[Headline] = HEADLINES) -> List[Dict[str, Any]]:
    """One line per (headline, GPU model): its run from the latest record of that GPU that has it."""
    out = []
    benches = sorted((d for d in records if d.get("part") == "bench"), key=lambda d: d["date"], reverse=True)
    for h in headlines:
        want = [set(h.run)] + [set(a) for a in h.also]
        seen_gpus = set()
        for d in benches:
            if gpu_model(d) in seen_gpus:
                continue
            runs = [r for r in d["data"]["runs"] if r.get("status") == "FINISHED" and _overrides(r["run"]) in want]
            if not runs:
                continue
            ours, base = _best(runs[-1]["rows"], h, False), _best(runs[-1]["rows"], h, True)
            if ours is None:
                continue
            seen_gpus.add(gpu_model(d))
            ratio = None
            if base is not None and ours["value"] > 0 and base["value"] > 0:
                ratio = ours["value"] / base["value"] if h.higher_is_better else base["value"] / ours["value"]
            out.append({"model": h.model, "measure": h.measure, "unit": h.unit, "ours": ours, "baseline": base,
                        "ratio": ratio, "gpu": short_gpu(d), "date": d["date"].split()[0]})
    return out


def results_table(records: List[Dict[str, Any]], headlines: Sequence[Headline] = HEADLINES) -> str:
    """The README's table (Markdown), generated from the records."""
    def cell(x, unit):
        return "-" if x is None else f"`{x['name']}` {_fmt(x['value'])} {unit}".rstrip()
    lines = ["| model | measure | ours | best baseline | ratio | GPU | date |", "|---|---|---|---|---|---|---|"]
    for r in results_rows(records, headlines):
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3g}x"
        lines.append(f"| `{r['model']}` | {r['measure']} | {cell(r['ours'], r['unit'])} | "
                     f"{cell(r['baseline'], r['unit'])} | {ratio} | {r['gpu']} | {r['date']} |")
    return "\n".join(lines)


def update_readme(text: str, table: str) -> str:
    """``text`` with the part between the results markers replaced by ``table``."""
    if RESULTS_START not in text or RESULTS_END not in text:
        raise SystemExit(f"error: the README has no {RESULTS_START} ... {RESULTS_END} block to fill")
    head, rest = text.split(RESULTS_START, 1)
    _, tail = rest.split(RESULTS_END, 1)
    note = ("<!-- generated by `python3 scripts/gpu_suite.py render docs/gpu-runs/*.json`: edit HEADLINES in "
            "scripts/gpu_suite.py, not this table -->")
    return f"{head}{RESULTS_START}\n{note}\n{table}\n{RESULTS_END}{tail}"


def record_name(rec: Dict[str, Any], tag: str = "") -> str:
    """``<date>T<HHMM>Z_<GPU>_<commit>_<part>[-<tag>].json``, e.g. 2026-11-21T1347Z_H200_25f6c38_bench.json."""
    tag = tag or str(rec.get("tag", ""))
    day, hm = rec["date"].split()[:2]
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", short_gpu(rec)).strip("-") or "unknown-GPU"
    commit = re.sub(r"[^A-Za-z0-9]+", "", str(rec.get("commit", ""))) or "unknown"
    return f"{day}T{hm.replace(':', '')}Z_{gpu}_{commit}_{rec['part']}{'-' + tag if tag else ''}.json"


def unused_path(out: Path, name: str) -> Path:
    """``out/name``, or ``out/<stem>-2.json``, ``-3``, ... when a record of the same part, GPU, commit and
    minute is already there (two invocations within a minute must not overwrite each other's record)."""
    f, n = out / name, 2
    while f.exists():
        f, n = out / f"{Path(name).stem}-{n}{Path(name).suffix}", n + 1
    return f


def short_table(records: List[Dict[str, Any]]) -> str:
    out = []
    for d in records:
        if d["part"] == "tests":
            out.append(f"tests: {d['data'].get('summary')} (rc={d['data']['rc']})")
        elif d["part"] == "bench":
            for r in d["data"]["runs"]:
                summ = {k[8:]: v for k, v in r["metrics"].items() if k.startswith("summary/")}
                out.append(f"{r['experiment']:<12} {r['status']:<9} " +
                           " ".join(f"{k}={_fmt(v)}" for k, v in list(summ.items())[:8]))
        elif d["part"] == "sanitize":
            for s in d["data"]["results"]:
                out.append(f"sanitize {s['model']:<12} {s['tool']:<10} errors={s['errors']} rc={s['rc']}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "outputs" / "gpu-suite")))
    r.add_argument("--parts", default="tests,bench,sanitize")
    r.add_argument("--models", default="", help="comma-separated suites of conf/suite/ (default: all)")
    r.add_argument("--suite", action="append", default=[],
                   help="a suite file (bench:/sanitize: lists) to run instead of conf/suite/ (repeatable)")
    r.add_argument("--bench-timeout", type=int, default=240)
    r.add_argument("--sanitize-timeout", type=int, default=240)
    r.add_argument("--sanitize-max", type=int, default=0, help="at most this many sanitize runs a suite (0: all)")
    r.add_argument("--bench-pick", default="",
                   help="run only these of each suite's bench list, numbered from 1 as `list` prints them: '1,14-17'")
    r.add_argument("--sanitize-pick", default="",
                   help="run only these of each suite's sanitize list, numbered from 1 as `list` prints them")
    r.add_argument("--sanitize-tools", default="",
                   help="compute-sanitizer tools, comma-separated: memcheck, racecheck (default: both)")
    r.add_argument("--extra", action="append", default=[],
                   help="benchmark these overrides (a quoted string, repeatable) instead of the suites' bench lists")
    r.add_argument("--tag", default="", help="suffix for the JSON file names (after the part); records tagged "
                   "'before' and 'after' on one GPU are compared run by run in docs/gpu-results.md")
    r.add_argument("--tree", default="", help="run the benchmarks in this other checkout of the project (e.g. "
                   "`git archive <commit>` unpacked): its `python -m pipeline`, its configs; the record names "
                   "the commit in its COMMIT file (or PIPELINE_COMMIT)")
    r.add_argument("pytest_args", nargs="*")
    ls = sub.add_parser("list", help="print the suites' runs as commands")
    ls.add_argument("--models", default="", help="comma-separated suites of conf/suite/ (default: all)")
    ls.add_argument("--suite", action="append", default=[], help="a suite file instead of conf/suite/")
    g = sub.add_parser("render")
    g.add_argument("files", nargs="+")
    g.add_argument("--to", default=str(ROOT / "docs" / "gpu-results.md"))
    g.add_argument("--readme", default=str(ROOT / "README.md"),
                   help="README whose results block is regenerated ('' to leave it alone)")
    t = sub.add_parser("table", help="print a Markdown table built from bench records, for the model docs")
    _table_args(t)
    n = sub.add_parser("rename", help="rename records to <date>_<GPU>_<commit>_<part>.json (git mv when tracked)")
    n.add_argument("files", nargs="+")
    a = ap.parse_args()
    if a.cmd == "list":
        a.models = [m for m in a.models.split(",") if m]
        for name, s in suites(a).items():
            for part in ("bench", "sanitize"):
                for i, ov in enumerate(getattr(s, part), 1):
                    print(f"{name} {part} {i}: python -m pipeline {' '.join(ov)}")
        return
    if a.cmd == "rename":
        for f in map(Path, a.files):
            to = f.with_name(record_name(json.loads(f.read_text())))
            if to == f:
                continue
            if to.exists():
                raise SystemExit(f"error: {to} exists; {f} holds the same part, GPU, commit and minute")
            tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(f)], cwd=ROOT,
                                     capture_output=True).returncode == 0
            if tracked:
                subprocess.run(["git", "mv", str(f), str(to)], cwd=ROOT, check=True)
            else:
                f.rename(to)
            print(f"{f} -> {to.name}")
        return
    if a.cmd == "table":
        if a.check_docs is not None or a.update_docs is not None:
            docs = [Path(x) for x in (a.check_docs or a.update_docs or [])] or sorted((ROOT / "docs" / "models").glob("*.md"))
            stale = doc_tables(docs, update=a.update_docs is not None)
            for s in stale:
                print(f"{s}: the table differs from its command's output" + (" (rewritten)" if a.update_docs is not None else ""))
            if stale and a.update_docs is None:
                raise SystemExit(f"error: {len(stale)} generated table(s) differ; `table --update-docs` rewrites them")
            return
        if not a.files:
            raise SystemExit("error: table needs bench records (or --check-docs / --update-docs)")
        print(table_from_args(a))
        return
    if a.cmd == "render":
        files = [Path(f) for f in a.files]
        Path(a.to).write_text(render(files))
        print(f"wrote {a.to}")
        if a.readme:
            readme = Path(a.readme)
            readme.write_text(update_readme(readme.read_text(), results_table([json.loads(f.read_text()) for f in files])))
            print(f"wrote the results table of {readme}")
        return
    a.models = [m for m in a.models.split(",") if m]
    sanitize_tools(a.sanitize_tools)                     # a wrong tool name: refused before any part runs
    a.tree = Path(a.tree).resolve() if a.tree else None
    if a.tree is not None and not (a.tree / "pipeline").is_dir():
        raise SystemExit(f"error: --tree {a.tree} holds no pipeline/ package; unpack a checkout of the project there")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = gpu_name()
    commit = source_commit(a.tree)
    log(f"GPU: {gpu}")
    records, files = [], []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    for part in [p for p in a.parts.split(",") if p]:
        if _STOP["why"]:
            log(f"{part}: not run ({_STOP['why']})")
            continue
        t0 = time.time()
        data = PARTS[part](out, a)
        if _STOP["why"]:
            data["interrupted"] = _STOP["why"]
        rec = {"part": part, "gpu": gpu, "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "commit": commit, "models": a.models, "seconds": time.time() - t0, "data": data}
        if a.tag:
            rec["tag"] = a.tag
        f = unused_path(out, record_name(rec))
        f.write_text(json.dumps(rec, indent=1, default=str))
        records.append(rec)
        files.append(f)
        log(f"{part} done in {time.time() - t0:.0f} s -> {f}")
    (out / "gpu-results.md").write_text(render(files))
    print("\n==== summary (" + gpu + ") ====\n" + short_table(records), flush=True)
    if _STOP["why"]:
        raise SystemExit(f"error: {_STOP['why']}: the records above hold what finished before it")
    bad = shortfalls(records)
    if bad:
        raise SystemExit(f"error: {'; '.join(bad)} (the records above say which)")


def source_commit(tree: Optional[Path] = None) -> str:
    """The commit of the tree being run: ``PIPELINE_COMMIT``, else ``.whl/COMMIT`` (written where a
    copy of the tree is staged for another machine, whose .git may be older than its files), else
    ``git rev-parse``; for ``--tree DIR``, PIPELINE_COMMIT or DIR/COMMIT."""
    commit = os.environ.get("PIPELINE_COMMIT", "").strip()
    if tree is not None:
        if not commit and (tree / "COMMIT").is_file():
            commit = (tree / "COMMIT").read_text().strip()
        return commit or "unknown"
    if not commit and (ROOT / ".whl" / "COMMIT").is_file():
        commit = (ROOT / ".whl" / "COMMIT").read_text().strip()
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                    text=True).stdout.strip()
        except Exception:
            commit = ""
    return commit or "unknown"


if __name__ == "__main__":
    main()
