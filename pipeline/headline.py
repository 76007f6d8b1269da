"""The one line a run ends with: which variant was fastest, by how much over each baseline, and how
the paper's own variant did, for every case of the report (a short count when there are many)."""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence

from pipeline.results import case_columns

# the time columns of the models' reports and their factor to milliseconds
TO_MS = {"median_ms": 1.0, "gpu_ms": 1.0, "time_s": 1e3, "layer_s": 1e3, "layer_ms": 1.0, "epoch_ms": 1.0, "epoch_s": 1e3}
# the measures a line may rank by, in the order they are looked for (device time before wall time),
# with what one of them is; a report may name its own (Report.measures: e.g. wide's epoch_ms is the
# wall time of an epoch, its gpu_ms the device time of the epoch's kernels)
MEASURES = {"median_ms": "a call", "gpu_ms": "GPU time an epoch", "epoch_ms": "an epoch", "time_s": "a pass"}
TIME_KEYS = tuple(MEASURES)
MAX_CASE_LINES = 4


def row_ms(row: Dict[str, Any], key: str) -> float:
    """The row's ``key`` in ms (a time column of ``TO_MS``; other columns as they are), NaN when it
    has no positive value."""
    v = row.get(key)
    try:
        f = float(v) * TO_MS.get(key, 1.0)
    except (TypeError, ValueError):
        return math.nan
    return f if f > 0 else math.nan


def _ms(t: float) -> str:
    return f"{t:.4g} ms" if t < 1e4 else f"{t / 1e3:.4g} s"


def time_key(rows: Sequence[Dict[str, Any]]) -> Optional[str]:
    """The measure the rows are ranked by: the first of ``TIME_KEYS`` that a variant of ours has."""
    for k in TIME_KEYS:
        if any(r.get("kind") == "ours" and not math.isnan(row_ms(r, k)) for r in rows):
            return k
    return None


def _case_label(row: Dict[str, Any]) -> str:
    cols = [c for c in case_columns(row) if c not in ("kind",)]
    if not cols:
        return ""
    if "case" in cols:
        return f"{row['case']}: "
    return " ".join(f"{c}={row[c]}" for c in cols) + ": "


def _ratio(row: Dict[str, Any], base: Dict[str, Any], keys: Sequence[str]) -> Optional[tuple]:
    """(ratio, measure) of ``base`` over ``row`` in the first measure of ``keys`` both have: for a
    side-by-side median the row's own ``x_vs_<baseline>`` (the median of the per-round ratios),
    else the ratio of the two times. None when they share no measure."""
    for key in keys:
        a, b = row_ms(row, key), row_ms(base, key)
        if math.isnan(a) or math.isnan(b):
            continue
        own = row_ms(row, f"x_vs_{base['variant']}") if key == "median_ms" else math.nan
        return (own if not math.isnan(own) else b / a), key
    return None


def _ratios(best: Dict[str, Any], bases: Sequence[Dict[str, Any]], key: str, measures: Dict[str, str]) -> str:
    """Each baseline's ratio over ``best``, in ``key``'s measure or (named) the next one both have;
    ratios whose rounds disagreed (``ratio_unstable``) are said to be unstable, never a plain Nx."""
    keys = TIME_KEYS[TIME_KEYS.index(key):] if key in TIME_KEYS else (key,)
    parts = []
    for b in bases:
        got = _ratio(best, b, keys)
        if got is None:
            continue
        x, k = got
        parts.append(f"{x:.3g}x {b['variant']}" + ("" if k == key else f" ({measures.get(k, k)})"))
    if not parts:
        return ""
    text = ", ".join(parts)
    if best.get("ratio_unstable") == "yes":
        spread = row_ms(best, "ratio_spread")
        text = (f"ratio unstable ({text}, the rounds' ratios spread {100 * spread:.0f} %: the machine's load "
                f"changed during the measurement; rerun on a quiet machine)")
    return text


def _line(rows: Sequence[Dict[str, Any]], key: str, paper: Optional[str], measures: Dict[str, str]) -> Optional[str]:
    # a floor (the empty kernel) computes nothing: never the fastest, never a ratio's baseline
    good = [r for r in rows if r.get("ok", True) is not False and r.get("variant") and r.get("kind") != "floor"]
    timed = [r for r in good if not math.isnan(row_ms(r, key))]
    ours = [r for r in timed if r.get("kind") == "ours"]
    if not ours:
        return None
    what = measures.get(key, key)
    best = min(ours, key=lambda r: row_ms(r, key))
    fastest = min(timed, key=lambda r: row_ms(r, key))
    t = row_ms(best, key)
    parts = [f"{_case_label(best)}fastest: {best['variant']} {_ms(t)} {what}"]
    if fastest is not best:
        parts = [f"{_case_label(best)}fastest: {fastest['variant']} {_ms(row_ms(fastest, key))} {what} (a baseline); "
                 f"ours best: {best['variant']} {_ms(t)}"]
    ratios = _ratios(best, [b for b in good if b.get("kind") == "baseline"], key, measures)
    if ratios:
        parts.append(ratios)
    if paper and best["variant"] == paper:
        parts.append("the paper's variant")
    elif paper:
        p = [r for r in timed if r["variant"] == paper]
        if p:
            parts.append(f"the paper's {paper} {_ms(row_ms(p[0], key))} ({row_ms(p[0], key) / t:.3g}x slower)")
    return "; ".join(parts)


def fastest_lines(rows: Sequence[Dict[str, Any]], paper: Optional[str] = None,
                  measures: Optional[Dict[str, str]] = None) -> List[str]:
    """One line per case: the fastest correct variant (ours; a baseline when one is faster) in the
    measure the line names (``MEASURES``, or the report's own ``measures``), its ratio over every
    baseline of the case in that measure, and the paper's variant beside it. More than
    ``MAX_CASE_LINES`` cases: one line counting which of ours was fastest how often."""
    measures = {**MEASURES, **(measures or {})}
    key = time_key(rows)
    if key is None:
        return []
    cases: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in rows:
        ident = tuple((c, str(r[c])) for c in case_columns(r) if c != "kind")
        cases.setdefault(ident, []).append(r)
    if len(cases) <= MAX_CASE_LINES:
        return [line for rs in cases.values() if (line := _line(rs, key, paper, measures))]
    wins: Counter = Counter()
    beaten = 0
    for rs in cases.values():
        good = [r for r in rs if r.get("ok", True) is not False and not math.isnan(row_ms(r, key))]
        ours = [r for r in good if r.get("kind") == "ours"]
        if ours:
            b = min(ours, key=lambda r: row_ms(r, key))
            wins[b["variant"]] += 1
            beaten += any(r.get("kind") == "baseline" and row_ms(r, key) < row_ms(b, key) for r in good)
    if not wins:
        return []
    text = ", ".join(f"{v} in {n}" for v, n in wins.most_common())
    tail = f"; a baseline was faster in {beaten}" if beaten else "; faster than every baseline in each"
    return [f"fastest of ours over {len(cases)} cases: {text}{tail} (per case: the table)"]
