"""``gpu_suite.py run`` and ``list``: the parts of the suite (the GPU tests, the benchmark runs and
the compute-sanitizer runs of ``conf/suite/``), each run as a child process and written to one
record; a SIGTERM or SIGINT stops after the running child (``suite_child``)."""
from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from suite_child import STOP, log, on_signal, run_child
from suite_records import fmt_value, gpu_name, record_name, source_commit, unused_path
from suite_render import render


def load_suites(args) -> Dict[str, Any]:
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


def list_runs(args) -> None:
    """``list``: every run of the suites as a command, numbered as ``--bench-pick`` takes them."""
    for name, s in load_suites(args).items():
        for part in ("bench", "sanitize"):
            for i, ov in enumerate(getattr(s, part), 1):
                print(f"{name} {part} {i}: python -m pipeline {' '.join(ov)}")


# ----------------------------------------------------------------------------------- parts

def part_tests(out: Path, args) -> Dict[str, Any]:
    xml = out / "pytest-gpu.xml"
    import importlib.util
    per_test = ["--timeout", "300"] if importlib.util.find_spec("pytest_timeout") else []   # (pytest-timeout)
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
           *per_test] + (args.pytest_args or [])
    log("pytest: " + " ".join(cmd[2:]))
    t0 = time.time()
    rc, text = run_child(cmd, 3000)
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


def read_mlflow_runs(store: Path) -> List[Dict[str, Any]]:
    """Every run of the MLflow store under ``store``: experiment, name, status, the summary, device
    and stage metrics, the tags and the rows of its results.csv."""
    import csv

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
    plan = [(name, ov) for name, s in load_suites(args).items() for ov in pick(s.bench, args.bench_pick)]
    if args.extra:   # explicit runs instead of the suite files' bench lists
        plan = [("extra", shlex.split(e)) for e in args.extra]
    for name, overrides in plan:
        cmd = [sys.executable, "-m", "pipeline", *overrides, f"tracking.dir={store}", "progress=false",
               "backend=cuda", f"hydra.run.dir={store}/runs/{len(jobs)}"]
        log(f"bench {name}: {' '.join(overrides)}")
        t0 = time.time()
        rc, text = run_child(cmd, args.bench_timeout, args.tree)
        print(text[-3000:], flush=True)
        errors = [l for l in text.splitlines() if l.startswith("error:") or "Error" in l][-3:]
        jobs.append({"model": name, "overrides": overrides, "rc": rc, "seconds": time.time() - t0,
                     "errors": errors})
        if STOP["why"]:
            break
    runs = read_mlflow_runs(store)
    return {"jobs": jobs, "runs": runs}


def part_sanitize(out: Path, args) -> Dict[str, Any]:
    results = []
    for name, s in load_suites(args).items():
        configs = pick(s.sanitize, args.sanitize_pick)
        for overrides in configs[: args.sanitize_max or None]:
            for tool in sanitize_tools(args.sanitize_tools):
                cmd = ["compute-sanitizer", "--tool", tool, "--print-limit", "20", sys.executable, "-m", "pipeline",
                       *overrides, "tracking.enabled=false", "progress=false", "backend=cuda",
                       "hydra.run.dir=/tmp/suite-sanitize"]
                log(f"sanitize {tool} {name}: {' '.join(overrides)}")
                t0 = time.time()
                rc, text = run_child(cmd, args.sanitize_timeout, env={"PIPELINE_CUDA_TOOL": f"compute-sanitizer {tool}"})
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
                if STOP["why"]:
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


# ---------------------------------------------------------------------------------- the run

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


def short_table(records: List[Dict[str, Any]]) -> str:
    """The summary printed at the end of a run: a line per test part, benchmark run and sanitizer run."""
    out = []
    for d in records:
        if d["part"] == "tests":
            out.append(f"tests: {d['data'].get('summary')} (rc={d['data']['rc']})")
        elif d["part"] == "bench":
            for r in d["data"]["runs"]:
                summ = {k[8:]: v for k, v in r["metrics"].items() if k.startswith("summary/")}
                out.append(f"{r['experiment']:<12} {r['status']:<9} " +
                           " ".join(f"{k}={fmt_value(v)}" for k, v in list(summ.items())[:8]))
        elif d["part"] == "sanitize":
            for s in d["data"]["results"]:
                out.append(f"sanitize {s['model']:<12} {s['tool']:<10} errors={s['errors']} rc={s['rc']}")
    return "\n".join(out)


def run_parts(a) -> None:
    """``run``: each part of ``--parts`` in turn, its record written to ``--out``, then the
    gpu-results.md of these records there and a summary; non-zero exit when stopped or short."""
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
        signal.signal(sig, on_signal)
    for part in [p for p in a.parts.split(",") if p]:
        if STOP["why"]:
            log(f"{part}: not run ({STOP['why']})")
            continue
        t0 = time.time()
        data = PARTS[part](out, a)
        if STOP["why"]:
            data["interrupted"] = STOP["why"]
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
    if STOP["why"]:
        raise SystemExit(f"error: {STOP['why']}: the records above hold what finished before it")
    bad = shortfalls(records)
    if bad:
        raise SystemExit(f"error: {'; '.join(bad)} (the records above say which)")
