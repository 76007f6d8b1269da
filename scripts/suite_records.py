"""The GPU suite's records: one JSON file a part (tests, bench, sanitize) of a ``gpu_suite.py run``,
named by date, GPU, commit and part (``2026-11-21T1347Z_H200_25f6c38_bench.json``). The GPU and
commit a record names, the overrides its runs are matched by, and how every table made from records
prints a number."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]

# overrides a recorded run's name may carry that do not change what it measures
IGNORED_OVERRIDES = ("progress=", "backend=", "cache_dir=", "model.budget_s=", "hydra.", "tracking.")


def gpu_name() -> str:
    """nvidia-smi's name, driver and memory of the first GPU ("NVIDIA H200, 580.159.04, 143771 MiB")."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        return out.splitlines()[0] if out else "unknown GPU"
    except Exception:
        return "no nvidia-smi"


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


def gpu_model(record: Dict[str, Any]) -> str:
    """The GPU's name in a record ("NVIDIA H200, 580.159.04, 143771 MiB" -> "NVIDIA H200")."""
    return str(record.get("gpu", "")).split(",")[0]


def short_gpu(record: Dict[str, Any]) -> str:
    return gpu_model(record).replace("NVIDIA ", "")


# sparse_dnn's time columns when they were in seconds, and their names in ms now
SPARSE_DNN_SECONDS = {"time_s": "median_ms", "iqr_s": "iqr_ms", "transfer_s": "transfer_ms", "compute_s": "compute_ms"}


def _ms(v: Any) -> Any:
    return v if as_number(v) is None else as_number(v) * 1e3


def read_record(f: Any) -> Dict[str, Any]:
    """A record file, with the sparse_dnn runs recorded in seconds (``time_s``, ...) read in the ms
    columns and metrics they have now (``median_ms``, ...): the one place old records are converted."""
    rec = json.loads(Path(f).read_text())
    for run in rec.get("data", {}).get("runs", []) if rec.get("part") == "bench" else []:
        if run.get("experiment") != "sparse_dnn" or not any("time_s" in r for r in run.get("rows", [])):
            continue
        run["rows"] = [{SPARSE_DNN_SECONDS.get(k, k): _ms(v) if k in SPARSE_DNN_SECONDS else v for k, v in r.items()}
                       for r in run["rows"]]
        run["metrics"] = {k.replace("/time_s", "/median_ms"):
                          _ms(v) if k.endswith("/time_s") or k == "summary/objective" else v
                          for k, v in run.get("metrics", {}).items()}
    return rec


def read_records(files: Sequence[Any]) -> List[Dict[str, Any]]:
    return [read_record(f) for f in files]


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


def rename_records(files: Sequence[Any]) -> None:
    """Give each record its name (``record_name``): ``git mv`` when git tracks it, else a rename; a
    record whose name is taken by another file is an error."""
    for f in map(Path, files):
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


def run_overrides(run_name: str) -> set:
    """The overrides of a recorded run's name that tell what it measured (``IGNORED_OVERRIDES`` left out)."""
    return {t for t in run_name.split() if not t.startswith(IGNORED_OVERRIDES)}


def as_number(v: Any) -> Optional[float]:
    """``v`` as a float; None for a non-number or NaN."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None


def fmt_value(v: Any) -> str:
    """A cell of a table: 4 significant digits, whole numbers from 10,000 up, 3 digits in scientific
    notation for very large or small numbers; anything else as it is ('' for None)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "" if v is None else str(v)
    if f != f:
        return "nan"
    if f == 0:
        return "0"
    a = abs(f)
    if a >= 1e9 or a < 1e-3:
        return f"{f:.2e}"
    return f"{f:.0f}" if a >= 1e4 else f"{f:.4g}"
