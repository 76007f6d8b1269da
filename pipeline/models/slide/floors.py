"""The memory floor of each phase of a SLIDE step: the bytes the phase's job must move between the
device memory and the chip, counted from the run's own work (``reference.WORK``, summed by every
SLIDE engine) and divided by the measured copy bandwidth (``Peaks.floor_s``). What each phase
counts: docs/models/slide.md, "Each phase against its memory floor".

A floor counts each distinct row once (a row read by several samples of a step can come from the
cache) and leaves out the scratch of our method (per-row counters, scans, sort passes beyond one):
``x_floor`` = the phase's time / its floor shows what the method costs beyond the data it must
touch. 4-byte floats and ids; H hidden units, a row 4 H bytes.
"""
from __future__ import annotations

from typing import Dict, Mapping

from pipeline.models.slide.reference import PHASES


def phase_bytes(w: Mapping[str, float], hidden: int, n_labels: int, L: int, nbuckets: int) -> Dict[str, float]:
    """Bytes each phase must move for the work ``w`` (reference.WORK counts and ``rebuilds``)."""
    row = 4.0 * hidden
    e, x, s = w["entries"], w["nnz"], w["samples"]
    out = {
        "input_fwd": w["rows_w1"] * row + 8 * x + s * row,
        "lsh_query": s * row + 4 * w["gathered"] + 4 * e,
        "output_fwd_softmax": w["rows_w2"] * (row + 4) + 12 * e + 2 * s * row,
        "output_bwd": 12 * e,
        "hidden_bwd": 12 * x,
        "update": 6 * (w["rows_w2"] * (row + 4) + w["rows_w1"] * row) + 8 * e + 8 * x,
        "rebuild": w["rows_hashed"] * row + w["rebuilds"] * (20.0 * L * n_labels + 4.0 * L * nbuckets),
    }
    return {p: float(out[p]) for p in PHASES}


def phase_table(w: Mapping[str, float], phase_ms: Mapping[str, float], hidden: int, n_labels: int, L: int,
                nbuckets: int, bandwidth: float = 0.0) -> Dict[str, Dict[str, float]]:
    """Per phase and for the whole ``step`` (all phases), a step's mean: ``us`` (time), ``mb`` (bytes
    it must move), and with the copy ``bandwidth`` (B/s; 0: unknown, the CPU) ``floor_us`` and
    ``x_floor`` (time / floor). ``w``: the run's work; ``phase_ms``: the run's time of each phase."""
    steps = max(float(w["steps"]), 1.0)
    nbytes = phase_bytes(w, hidden, n_labels, L, nbuckets)
    nbytes["step"] = sum(nbytes.values())
    ms = dict(phase_ms, step=sum(phase_ms.get(p, 0.0) for p in PHASES))
    out = {}
    for p, b in nbytes.items():
        r = {"us": 1e3 * ms.get(p, 0.0) / steps, "mb": b / steps / 1e6}
        if bandwidth > 0:
            r["floor_us"] = 1e6 * b / bandwidth / steps
            r["x_floor"] = r["us"] / r["floor_us"] if r["floor_us"] > 0 else float("nan")
        out[p] = r
    return out


def note(name: str, table: Mapping[str, Mapping[str, float]], rows_touched: float) -> str:
    """One line: each phase's time a step against its floor."""
    def one(p, r):
        if "floor_us" in r:
            return f"{p} {r['us']:.4g} us (floor {r['floor_us']:.3g} us, {r['x_floor']:.3g}x)"
        return f"{p} {r['us']:.4g} us ({r['mb']:.3g} MB)"
    floor = ("against its memory floor (the bytes it must move at the measured copy bandwidth)"
             if "floor_us" in table["step"] else "and the MB it must move (floors: on the GPU)")
    return (f"{name} phases, a step's mean {floor}: " + ", ".join(one(p, r) for p, r in table.items()) +
            f"; {rows_touched:,.0f} W2 rows updated a step (rows_touched)")
