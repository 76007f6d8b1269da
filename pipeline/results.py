"""What a run produces: a results table, summary metrics, per-epoch series, figures, and the list
of failed checks. Also the plain-text table the terminal shows.

A row lists the columns that describe its case first (``case``, ``layer``, ``k``, ``N``, ...), then
``variant``, then what was measured (``kind``, ``median_ms``, ``x_vs_<baseline>``, ...):
:func:`case_columns` and :func:`variant_metrics` rely on that order."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence


@dataclass
class Report:
    rows: List[Dict[str, Any]] = field(default_factory=list)     # one row per (case, variant)
    columns: List[str] = field(default_factory=list)             # display order (default: keys of row 0)
    metrics: Dict[str, float] = field(default_factory=dict)      # logged once
    series: Dict[str, List[float]] = field(default_factory=dict) # logged with step = index (per epoch)
    figures: Dict[str, Any] = field(default_factory=dict)        # name.png -> matplotlib Figure
    failures: List[str] = field(default_factory=list)            # failed checks: the run is FAILED
    notes: List[str] = field(default_factory=list)
    title: str = ""
    # what a time column measures, where it is not what pipeline.headline.MEASURES says (the
    # fastest line names it): e.g. {"epoch_ms": "wall time an epoch"}
    measures: Dict[str, str] = field(default_factory=dict)

    def drop_device_columns(self) -> None:
        """Remove the columns that time a GPU (``gpu_ms``, ``to_target_gpu_s``, ...): on the CPU
        backend there is none, and a ``gpu_`` column there would name a CPU time wrongly."""
        gone = {c for r in self.rows for c in r if is_device_column(c)}
        for r in self.rows:
            for c in gone:
                r.pop(c, None)
        self.columns = [c for c in self.columns if c not in gone]

    def extend(self, other: "Report") -> None:
        self.rows += other.rows
        for c in other.columns:
            if c not in self.columns:
                self.columns.append(c)
        self.metrics.update(other.metrics)
        self.series.update(other.series)
        self.figures.update(other.figures)
        self.failures += other.failures
        self.notes += other.notes
        self.measures.update(other.measures)


def is_device_column(name: str) -> bool:
    """A column that times a GPU: ``gpu`` is one of its ``_``-separated words and it ends in a
    unit of time (``gpu_ms``, ``to_target_gpu_s``; not ``per_gpu``)."""
    words = name.split("_")
    return "gpu" in words[:-1] and words[-1] in ("ms", "s", "us")


CASE_END = "variant"                 # the column that ends a row's case description
NOT_MEASURES = {"kind", "ok", "tol", "reps", "graph"}


def case_columns(row: Dict[str, Any]) -> List[str]:
    """The columns of ``row`` before ``variant``: what the case is (empty without a ``variant``)."""
    cols = list(row)
    return cols[: cols.index(CASE_END)] if CASE_END in cols else []


def finite_number(v: Any) -> Optional[float]:
    """``v`` as a float when it is a real number (also a NumPy scalar; not a bool) and not NaN, else None."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return None
    f = float(v)
    return f if f == f else None


def variant_metrics(rows: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """For a report whose rows are one case (each variant in one row): ``{"metrics": {"<variant>/<col>":
    value}, "case": {col: value}}``: every numeric measurement of every variant under a name that
    does not depend on the case, and the case's columns (the same in every row) for params. So
    every run of a sweep logs the same names, whatever knob the sweep turns. ``None`` when a
    variant appears in several rows (a multi-case run: its keys name the case)."""
    names = [r.get(CASE_END) for r in rows]
    if not rows or None in names or len(set(names)) != len(names):
        return None
    case = {c: rows[0].get(c) for c in case_columns(rows[0]) if len({str(r.get(c)) for r in rows}) == 1}
    metrics: Dict[str, float] = {}
    for r in rows:
        skip = set(case_columns(r)) | NOT_MEASURES | {CASE_END}
        for c, v in r.items():
            f = finite_number(v)
            if c not in skip and f is not None:
                metrics[f"{r[CASE_END]}/{c}"] = f
    return {"metrics": metrics, "case": case}


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "ok" if v else "FAIL"
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral):   # also NumPy float32
        v = float(v)
        if math.isnan(v):
            return "nan"
        a = abs(v)
        if a == 0:
            return "0"
        if a >= 1e5 or a < 1e-3:
            return f"{v:.2e}"
        if a >= 100:
            return f"{v:.1f}"
        return f"{v:.4g}"
    return str(v)


def format_table(rows: Sequence[Dict[str, Any]], columns: Optional[Sequence[str]] = None,
                 markdown: bool = False) -> str:
    if not rows:
        return "(no rows)"
    cols = list(columns) if columns else list(rows[0].keys())
    cols = [c for c in cols if any(c in r for r in rows)]
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    if markdown:
        lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
        return "\n".join(lines)
    lines = [cols, ["-" * w for w in widths]] + cells
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in lines)


def to_csv(rows: Sequence[Dict[str, Any]], columns: Optional[Sequence[str]] = None) -> str:
    import csv
    import io
    cols = list(columns) if columns else list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()
