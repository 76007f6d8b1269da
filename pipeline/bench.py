"""Side-by-side measurement of variants on the same inputs: check first, then time.

A model describes each problem instance as a :class:`Case` (host inputs + a float64 reference) and
each implementation as a :class:`Variant` whose ``build(case, ctx)`` does the untimed setup
(upload, compilation, plans, output allocation poisoned with NaN) and returns ``run()``, which
enqueues the work and returns its outputs. :func:`measure` then, for every variant:

1. calls ``run()`` once and compares each output with the reference (relative error
   ``||out - ref|| / ||ref||``, float64); a NaN or an unwritten (poisoned) element fails;
2. times the ``run()`` of all variants of the case together, interleaved round by round
   (:func:`pipeline.timing.time_interleaved`: warm-up, repeats, median, IQR);
3. derives achieved GB/s and GFLOP/s from the variant's cost model and the fraction of the
   device's measured peak, and the speedup of each variant over each baseline from the same
   rounds (:func:`pipeline.timing.speedups`: the median of per-round ratios, with their spread and
   a ``ratio_unstable`` flag).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from pipeline.context import Context
from pipeline.gpu.transfer import to_host
from pipeline.timing import cpu_threads, speedups, time_interleaved


@dataclass
class Cost:
    bytes: float = 0.0          # fewest bytes the variant must move through device memory
    flops: float = 0.0          # floating-point operations it must do
    precision: str = "fp32"     # which FLOP peak applies: fp32 | tf32


@dataclass
class Case:
    name: str
    params: Dict[str, Any]
    inputs: Dict[str, np.ndarray]
    reference: Callable[[], Dict[str, np.ndarray]]   # float64 expected outputs
    _ref: Optional[Dict[str, np.ndarray]] = field(default=None, repr=False)

    def expected(self) -> Dict[str, np.ndarray]:
        if self._ref is None:
            self._ref = self.reference()
        return self._ref


@dataclass
class Variant:
    name: str
    kind: str                                            # "ours" | "baseline"
    build: Callable[[Case, Context], Callable[[], Dict[str, Any]]]
    cost: Optional[Callable[[Case], Cost]] = None
    tolerance: Optional[float] = None                    # default: the model's tolerance
    check: Optional[Callable[[Dict[str, np.ndarray], Dict[str, np.ndarray]], Dict[str, float]]] = None
    note: str = ""
    graph: bool = False      # run() may be captured as a CUDA graph (no host sync inside)


def _poison(hook, replay) -> None:
    """NaN-fill the graph's outputs (and the variant's intermediates) so that a replay that does
    not write everything fails the check."""
    import cupy
    if hook:
        hook()
    outs = getattr(getattr(replay, "__self__", None), "outputs", None)
    if outs is None:
        outs = replay()
    for a in (outs.values() if isinstance(outs, dict) else outs):
        if isinstance(a, cupy.ndarray) and a.dtype.kind in "fc":
            a.fill(np.nan)
    cupy.cuda.Device().synchronize()


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape} != reference shape {ref.shape}")
    if not np.all(np.isfinite(out)):
        return float("nan")
    denom = np.linalg.norm(ref.ravel())
    return float(np.linalg.norm((out - ref).ravel()) / (denom if denom > 0 else 1.0))


def compare(outputs: Dict[str, Any], expected: Dict[str, np.ndarray]) -> Dict[str, float]:
    return {k: rel_error(to_host(outputs[k]), v) for k, v in expected.items()}


RATIO_SPREAD = 0.10   # bench.ratio_spread: a ratio whose per-round IQR exceeds this share of it is unstable


def measure(cases: Sequence[Case], variants: Sequence[Variant], ctx: Context, tolerance: float,
            speedup_over: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Rows of (case, variant) measurements, as the module docstring says; ``ratio_unstable`` is set
    (with a notice) where ``ratio_spread`` exceeds ``bench.ratio_spread``."""
    rows: List[Dict[str, Any]] = []
    limit = float(ctx.cfg.bench.get("ratio_spread", RATIO_SPREAD))
    if not ctx.cuda and cpu_threads(ctx.cfg.bench) > 0:
        ctx.notice(f"CPU timings run with the BLAS / OpenMP thread pools pinned to {cpu_threads(ctx.cfg.bench)} "
                   f"thread(s) (bench.cpu_threads; 0 leaves them as they are)")
    total = len(cases) * len(variants)
    bar = ctx.progress(range(total), desc="measure", total=total)
    it = iter(bar)
    for case in cases:
        expected = case.expected()
        case_rows, runs, streams, alive = [], [], [], []
        for v in variants:
            next(it, None)
            if hasattr(bar, "set_postfix_str"):
                bar.set_postfix_str(f"{case.name} {v.name}")
            row: Dict[str, Any] = {"case": case.name, **case.params, "variant": v.name, "kind": v.kind}
            run = v.build(case, ctx)
            outputs = run()          # eager: plans, buffers, compilation
            ctx.sync()
            row["graph"] = "-"
            stream = None
            if ctx.cuda and v.graph and ctx.cfg.bench.get("cuda_graph", False):
                from pipeline.gpu.graphs import try_capture
                replay, captured = try_capture(run, ctx.notice, f"{case.name}/{v.name}")
                row["graph"] = "yes" if captured else "no"
                if captured:
                    _poison(getattr(run, "poison", None), replay)
                    run = replay
                    stream = replay.__self__.stream   # time the replays on the stream they run on
                outputs = run()
                ctx.sync()
            if v.kind == "floor":                # computes nothing: nothing to check
                row.update(rel_err=float("nan"), tol=float("nan"), ok=None)
            else:
                errs = (v.check or compare)(outputs, expected)
                err = max(errs.values()) if errs else float("nan")
                tol = v.tolerance if v.tolerance is not None else tolerance
                row.update(rel_err=err, tol=tol, ok=bool(np.isfinite(err) and err <= tol))
            alive.append(outputs)   # run() writes into these buffers: they must outlive the timing
            case_rows.append(row)
            runs.append(run)
            streams.append(stream)
        timed = time_interleaved(runs, ctx.cfg.bench, ctx.backend, streams)
        for v, row, t in zip(variants, case_rows, timed.timings):
            row.update(median_ms=t.median_ms, iqr_ms=t.iqr_ms, min_ms=t.min_ms, reps=t.n)
            if v.cost is not None:
                c = v.cost(case)
                sec = t.median_ms * 1e-3
                row["gbps"] = c.bytes / sec / 1e9 if c.bytes else None
                row["gflops"] = c.flops / sec / 1e9 if c.flops else None
                if ctx.peaks is not None:
                    row["pct_peak"] = 100.0 * ctx.peaks.floor_s(c.bytes or 0.0, c.flops or 0.0, c.precision) / sec
        del runs, alive
        speedups(case_rows, [v.name for v in variants if v.kind == "ours"], speedup_over,
                 rounds=timed, spread_limit=limit)
        unstable = [r["variant"] for r in case_rows if r.get("ratio_unstable") == "yes" and r["kind"] != "floor"]
        if unstable:
            ctx.notice(f"{case.name}: ratios of {', '.join(unstable)} vary by more than {100 * limit:.0f} % "
                       f"from round to round (see ratio_spread): the machine's load changed during the "
                       f"measurement; rerun on a quiet machine or raise bench.min_time_ms")
        rows += case_rows
    if hasattr(bar, "close"):
        bar.close()
    return rows


def launch_floor() -> Variant:
    """An empty one-thread kernel timed like every variant (a one-node graph replay where graphs
    are on): the least any one-kernel variant can measure on this device. Kind ``floor``: never
    checked or ranked; its ``x_vs_<baseline>`` is the largest ratio a one-kernel design could show."""
    def build(case: Case, ctx):
        from pipeline.gpu.timer import hold_kernel
        k = hold_kernel()

        def run():
            k((1,), (1,), np.uint64(0))
            return {}
        return run
    return Variant("launch_floor", "floor", build, None, graph=True, note="empty kernel: the timing floor")


BENCH_COLUMNS = ["case", "variant", "kind", "graph", "median_ms", "iqr_ms", "rel_err", "ok", "gbps", "gflops", "pct_peak",
                 "ratio_spread", "ratio_unstable"]


def failures(rows: Sequence[Dict[str, Any]]) -> List[str]:
    return [f"{r['case']}/{r['variant']}: relative error {r['rel_err']:.3g} > {r['tol']:.1g}"
            for r in rows if r.get("ok", True) is False]


def best_metrics(rows: Sequence[Dict[str, Any]], baselines: Sequence[str]) -> Dict[str, float]:
    """The fastest correct variant of ours: ``best_ms`` and ``x_vs_<baseline>`` (its ratio over each
    baseline) when the rows are one case, so that every run of a sweep logs the same names; per
    case ``summary/<case>/best_ms`` and ``summary/<case>/best_x_vs_<baseline>`` when there are
    several. ``summary/objective`` (the mean of the best times) for sweeps either way."""
    best: Dict[str, Dict[str, Any]] = {}
    for r in rows:
        if r["kind"] == "ours" and r.get("ok"):
            b = best.get(r["case"])
            if b is None or r["median_ms"] < b["median_ms"]:
                best[r["case"]] = r
    out: Dict[str, float] = {}
    one_case = len({r["case"] for r in rows}) == 1
    for case, r in best.items():
        prefix = "" if one_case else f"summary/{case}/best_"
        out["best_ms" if one_case else f"summary/{case}/best_ms"] = r["median_ms"]
        for b in baselines:
            if f"x_vs_{b}" in r:
                out[f"{prefix}x_vs_{b}"] = r[f"x_vs_{b}"]
    if best:
        out["summary/objective"] = float(np.mean([r["median_ms"] for r in best.values()]))
    return out
