"""The one line a run ends with: which variant was fastest, by how much over each baseline, and how
the paper's own variant did, for every case of the report (a short count when there are many)."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

from pipeline.results import case_columns

# the time columns of the models' reports and their factor to milliseconds, device time first (the
# order in which a row's time is looked for where any column will do)
TO_MS = {"median_ms": 1.0, "gpu_ms": 1.0, "time_s": 1e3, "layer_s": 1e3, "epoch_ms": 1.0, "epoch_s": 1e3}
TIME_KEYS = ("median_ms", "epoch_ms", "time_s")   # the time a report ranks its variants by, first found
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
    for k in TIME_KEYS:
        if any(k in r for r in rows):
            return k
    return None


def _case_label(row: Dict[str, Any]) -> str:
    cols = [c for c in case_columns(row) if c not in ("kind",)]
    if not cols:
        return ""
    if "case" in cols:
        return f"{row['case']}: "
    return " ".join(f"{c}={row[c]}" for c in cols) + ": "


def _ratio(row: Dict[str, Any], base: Dict[str, Any], key: str) -> float:
    """The row's own ``x_vs_<baseline>`` (the per-round median of a side-by-side measurement) when
    it has one, else the ratio of the two times."""
    own = row_ms(row, f"x_vs_{base['variant']}")
    return own if not math.isnan(own) else row_ms(base, key) / row_ms(row, key)


def _line(rows: Sequence[Dict[str, Any]], key: str, paper: Optional[str]) -> Optional[str]:
    good = [r for r in rows if r.get("ok", True) is not False and not math.isnan(row_ms(r, key))
            and r.get("variant")]
    ours = [r for r in good if r.get("kind") == "ours"]
    if not ours:
        return None
    best = min(ours, key=lambda r: row_ms(r, key))
    fastest = min(good, key=lambda r: row_ms(r, key))
    t = row_ms(best, key)
    parts = [f"{_case_label(best)}fastest: {best['variant']} {_ms(t)}"]
    if fastest is not best:
        parts = [f"{_case_label(best)}fastest: {fastest['variant']} {_ms(row_ms(fastest, key))} (a baseline); "
                 f"ours best: {best['variant']} {_ms(t)}"]
    ratios = [f"{_ratio(best, b, key):.3g}x {b['variant']}" for b in good if b.get("kind") == "baseline"]
    if ratios:
        parts.append(", ".join(ratios))
    if paper and best["variant"] == paper:
        parts.append("the paper's variant")
    elif paper:
        p = [r for r in good if r["variant"] == paper]
        if p:
            parts.append(f"the paper's {paper} {_ms(row_ms(p[0], key))} ({row_ms(p[0], key) / t:.3g}x slower)")
    return "; ".join(parts)


def fastest_lines(rows: Sequence[Dict[str, Any]], paper: Optional[str] = None) -> List[str]:
    """One line per case: the fastest correct variant (ours; a baseline when one is faster), its
    ratio over every baseline of the case, and the paper's variant beside it. More than
    ``MAX_CASE_LINES`` cases: one line counting which of ours was fastest how often."""
    key = time_key(rows)
    if key is None:
        return []
    cases: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in rows:
        ident = tuple((c, str(r[c])) for c in case_columns(r) if c != "kind")
        cases.setdefault(ident, []).append(r)
    if len(cases) <= MAX_CASE_LINES:
        return [line for rs in cases.values() if (line := _line(rs, key, paper))]
    wins: Dict[str, int] = {}
    beaten = 0
    for rs in cases.values():
        good = [r for r in rs if r.get("ok", True) is not False and not math.isnan(row_ms(r, key))]
        ours = [r for r in good if r.get("kind") == "ours"]
        if not ours:
            continue
        b = min(ours, key=lambda r: row_ms(r, key))
        wins[b["variant"]] = wins.get(b["variant"], 0) + 1
        beaten += any(r.get("kind") == "baseline" and row_ms(r, key) < row_ms(b, key) for r in good)
    if not wins:
        return []
    order = sorted(wins.items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{v} in {n}" for v, n in order)
    tail = f"; a baseline was faster in {beaten}" if beaten else "; faster than every baseline in each"
    return [f"fastest of ours over {len(cases)} cases: {text}{tail} (per case: the table)"]
