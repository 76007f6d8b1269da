"""The one place that times things: CUDA events on a GPU, ``perf_counter`` on the CPU backend.

Policy (same for ours and for baselines): ``warmup`` untimed calls first (compilation, FFT plans,
cuBLAS handles stay out of the numbers), then timed calls until at least ``min_repeats`` calls and
``min_time_ms`` of measured time (at most ``max_repeats``). Reported: median, interquartile range,
minimum and count.

This module is backend-neutral; the CUDA side (the hold kernel that keeps an idle GPU from
counting the host's launch latency, the CUDA-event timers) is :mod:`pipeline.gpu.timer`, imported
only when the backend is ``cuda``.

Variants that are compared are timed together (:func:`time_interleaved`): in rounds, each round
timing every variant in turn (the order reversed every other round: A B B A A B ...), so that load
that comes and goes on the machine lands on all of them alike. A ratio between two variants is
taken round by round; the spread of those per-round ratios says whether the comparison was stable.
:func:`speedups` turns either (per-round ratios, or one number per variant such as an epoch time)
into the ``x_vs_<baseline>`` columns every model reports.

On the CPU the BLAS and OpenMP thread pools are pinned to ``bench.cpu_threads`` threads (threadpoolctl)
while a measurement runs: a multi-threaded BLAS call that competes with other load on the machine
slows down by far more than a single-threaded FFT does, which made ratios swing tenfold between
runs.

Intervals of work that are not repeated calls (a training epoch, the layers of a step) are timed
with :class:`Interval` (one interval) and :class:`IntervalSum` (many, summed).
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from pipeline.timing_policy import Timing, policy


CPU_THREADS = 1   # bench.cpu_threads: numpy's FFT is single-threaded, so one thread puts BLAS on a par


def cpu_threads(bench) -> int:
    """The threads the CPU's BLAS / OpenMP pools get while timing (``bench.cpu_threads``; 0: as
    they are)."""
    get = getattr(bench, "get", None)
    return int(get("cpu_threads", CPU_THREADS) if get else getattr(bench, "cpu_threads", CPU_THREADS))


@contextlib.contextmanager
def pinned_threads(bench):
    """Pin the BLAS and OpenMP thread pools to :func:`cpu_threads` threads for a CPU measurement."""
    n = cpu_threads(bench)
    if n <= 0:
        yield
        return
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=n):
        yield


class _CpuClock:
    """``perf_counter`` with the interface of :class:`pipeline.gpu.timer.CudaClock`."""

    def sample(self, fn: Callable[[], object], calls: int, i: int = 0) -> List[float]:
        out = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out

    def warm(self, fn: Callable[[], object], n: int, i: int = 0) -> float:
        return float(np.median(self.sample(fn, max(n, 1))))


def time_cpu(fn: Callable[[], object], bench) -> Timing:
    warmup, min_rep, max_rep, min_ms = policy(bench)
    samples: List[float] = []
    with pinned_threads(bench):
        for _ in range(warmup):
            fn()
        while len(samples) < max_rep and (len(samples) < min_rep or sum(samples) < min_ms):
            samples += _CpuClock().sample(fn, 1)
    return Timing.of(samples)


@dataclass
class Interleaved:
    """What :func:`time_interleaved` measured: one :class:`Timing` per function (all its samples)
    and, per function, the median of its samples in each round (the same rounds for all)."""
    timings: List[Timing]
    rounds: List[List[float]] = field(default_factory=list)

    def ratio(self, num: int, den: int) -> "Ratio":
        """Per-round ``rounds[num] / rounds[den]`` (e.g. baseline time over variant time)."""
        return Ratio.of([a / b for a, b in zip(self.rounds[num], self.rounds[den]) if b > 0])


@dataclass
class Ratio:
    median: float
    spread: float       # interquartile range of the per-round ratios over their median
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Ratio":
        if not len(values):
            return cls(float("nan"), float("nan"), 0)
        q1, med, q3 = np.percentile(np.asarray(values, dtype=np.float64), [25, 50, 75])
        return cls(float(med), float((q3 - q1) / med) if med > 0 else float("nan"), len(values))


def time_interleaved(fns: Sequence[Callable[[], object]], bench, backend: str = "cpu",
                     streams: Optional[Sequence] = None) -> Interleaved:
    """Time several functions side by side, in rounds (see the module's docstring).

    Each function is warmed up ``warmup`` times, which also estimates its time ``t``. It should get
    ``n = clamp(ceil(min_time_ms / t), min_repeats, max_repeats)`` samples, as :func:`time_cpu`
    would give it alone; there are ``R = min(n)`` rounds (the slowest function's count), and a
    function is called ``ceil(n / R)`` times a round, so a fast kernel is not timed as rarely as a
    slow one nor a slow one as often as a fast one. Rounds are added (at most ``R`` more) while a
    function is short of ``min_time_ms`` because the warm-up underestimated it. On the CPU the
    thread pools are pinned (:func:`pinned_threads`)."""
    if backend == "cuda":
        from pipeline.gpu.timer import CudaClock
        return _interleave(fns, bench, CudaClock(bench, list(streams) if streams is not None else [None] * len(fns)))
    with pinned_threads(bench):
        return _interleave(fns, bench, _CpuClock())


def _interleave(fns, bench, clock) -> Interleaved:
    warmup, min_rep, max_rep, min_ms = policy(bench)
    k = len(fns)
    est = [clock.warm(fns[i], warmup, i) for i in range(k)]
    want = [min(max_rep, max(min_rep, math.ceil(min_ms / t) if t > 0 else max_rep)) for t in est]
    n_rounds = max(1, min(want))
    calls = [max(1, math.ceil(w / n_rounds)) for w in want]
    samples: List[List[float]] = [[] for _ in range(k)]
    rounds: List[List[float]] = [[] for _ in range(k)]
    r = 0
    while r < n_rounds or (r < 2 * n_rounds and any(
            sum(samples[i]) < min_ms and len(samples[i]) < max_rep for i in range(k))):
        order = range(k) if r % 2 == 0 else reversed(range(k))
        for i in order:
            s = clock.sample(fns[i], calls[i], i)
            samples[i] += s
            rounds[i].append(float(np.median(s)))
        r += 1
    return Interleaved([Timing.of(s) for s in samples], rounds)


def timer_for(backend: str):
    """``time_cuda`` (:mod:`pipeline.gpu.timer`) on the GPU, :func:`time_cpu` on the CPU."""
    if backend == "cuda":
        from pipeline.gpu.timer import time_cuda
        return time_cuda
    return time_cpu


class IntervalSum:
    """Many intervals of work summed (e.g. the linear layers of every training step): ``t =
    start()`` ... ``stop(t)`` around each, without waiting for the device; ``total_ms()`` waits once
    and returns the sum so far; ``reset()`` starts again. CUDA events on ``stream`` (default: the
    stream our launches use) on the GPU, ``perf_counter`` on the CPU."""

    def __init__(self, backend: str, stream=None):
        self.cuda = backend == "cuda"
        if self.cuda:
            from pipeline.gpu.timer import CudaIntervalSum
            self._clock = CudaIntervalSum(stream)
        self.ms = 0.0

    def start(self):
        return self._clock.start() if self.cuda else time.perf_counter()

    def stop(self, token) -> None:
        if self.cuda:
            self._clock.stop(token)
        else:
            self.ms += (time.perf_counter() - token) * 1e3

    def total_ms(self) -> float:
        return self._clock.total_ms() if self.cuda else self.ms

    def reset(self) -> None:
        if self.cuda:
            self._clock.reset()
        self.ms = 0.0


class Interval:
    """Time one interval of work (e.g. a training epoch): ``start()``, then ``stop()`` -> ms (waiting
    for the device); an :class:`IntervalSum` of one."""

    def __init__(self, backend: str, stream=None):
        self._sum = IntervalSum(backend, stream)

    def start(self) -> None:
        self._sum.reset()
        self._token = self._sum.start()

    def stop(self) -> float:
        self._sum.stop(self._token)
        return self._sum.total_ms()


def speedups(rows: List[Dict[str, Any]], ours: Sequence[str], baselines: Sequence[str], col: str = "median_ms",
             key: str = "variant", rounds: Optional[Interleaved] = None,
             spread_limit: Optional[float] = None) -> List[Dict[str, Any]]:
    """Add ``x_vs_<b>`` (how many times faster than baseline ``b``) to every row but ``b``'s own
    (ours and the other baselines alike); returns ``rows``. The one place a speedup is computed.

    Without ``rounds``: ``rows[b][col] / row[col]``; rows missing ``col`` or with a non-positive
    value (or a non-finite baseline value) get none. With ``rounds`` (what :func:`time_interleaved`
    measured, ``rows[i]`` being its function ``i``): the median of the per-round ratios, and
    ``ratio_spread`` = the largest of their interquartile ranges over their medians; with
    ``spread_limit`` also ``ratio_unstable`` ("yes" when the spread exceeds it, else "no").
    ``ours`` names our variants; it does not filter."""
    index = {r[key]: i for i, r in enumerate(rows)}
    for i, r in enumerate(rows):
        spreads = []
        for b in baselines:
            if b == r[key] or b not in index:
                continue
            if rounds is not None:
                ratio = rounds.ratio(index[b], i)
                r[f"x_vs_{b}"] = ratio.median
                spreads.append(ratio.spread)
                continue
            v, bv = r.get(col), rows[index[b]].get(col)
            if v is None or bv is None or not (float(v) > 0) or not math.isfinite(float(bv)):
                continue
            r[f"x_vs_{b}"] = float(bv) / float(v)
        if spreads:
            r["ratio_spread"] = max(spreads)
            if spread_limit is not None:
                r["ratio_unstable"] = "yes" if r["ratio_spread"] > spread_limit else "no"
    return rows
