"""The one place that times things: CUDA events on a GPU, ``perf_counter`` on the CPU backend.

Policy (same for ours and for baselines): ``warmup`` untimed calls first (compilation, FFT plans,
cuBLAS handles stay out of the numbers), then timed calls until at least ``min_repeats`` calls and
``min_time_ms`` of measured time (at most ``max_repeats``). Reported: median, interquartile range,
minimum and count.

On the GPU the number is device time: before each timed call a short "hold" kernel
(``cuda/common/hold.cu``) keeps the stream busy while the host issues the call, so an idle GPU does
not count the host's launch latency (a few microseconds, which would otherwise dominate kernels that
take one or two). The hold lasts twice the host's issue time measured in the warm-up (at least
20 us); calls that take the host longer than ``HOLD_MAX_US`` to issue (host-synchronising work) are
timed without it. ``bench.hold: false`` turns it off (then the host's issue time is included).

Variants that are compared are timed together (:func:`time_interleaved`): in rounds, each round
timing every variant in turn (the order reversed every other round: A B B A A B ...), so that load
that comes and goes on the machine lands on all of them alike. A ratio between two variants is
taken round by round; the spread of those per-round ratios says whether the comparison was stable.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

import numpy as np


@dataclass
class Timing:
    median_ms: float
    iqr_ms: float
    min_ms: float
    n: int

    @classmethod
    def of(cls, samples_ms: List[float]) -> "Timing":
        a = np.asarray(samples_ms, dtype=np.float64)
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        return cls(float(med), float(q3 - q1), float(a.min()), int(a.size))

    def __str__(self) -> str:
        return f"{self.median_ms:.4f} ms (IQR {self.iqr_ms:.4f}, n={self.n})"


def _policy(bench):
    return (int(bench.warmup), int(bench.min_repeats), int(bench.max_repeats), float(bench.min_time_ms))


def time_cpu(fn: Callable[[], object], bench) -> Timing:
    warmup, min_rep, max_rep, min_ms = _policy(bench)
    for _ in range(warmup):
        fn()
    samples: List[float] = []
    total = 0.0
    while len(samples) < max_rep and (len(samples) < min_rep or total < min_ms):
        t0 = time.perf_counter()
        fn()
        dt = (time.perf_counter() - t0) * 1e3
        samples.append(dt)
        total += dt
    return Timing.of(samples)


HOLD_MIN_US = 20.0
HOLD_MAX_US = 2000.0


def hold_kernel():
    from pipeline.gpu import kernels
    return kernels.load("common", "hold.cu").kernel("hold_ns", "Q")


def time_cuda(fn: Callable[[], object], bench, stream=None) -> Timing:
    """Time ``fn`` (which enqueues device work on ``stream``, default the null stream) with CUDA
    events recorded around every call (each after a hold kernel, see the module's docstring);
    events are read in batches so the host does not stall the queue between calls."""
    import pycuda.driver as drv

    warmup, min_rep, max_rep, min_ms = _policy(bench)
    issue_us = []
    for _ in range(max(warmup, 1)):
        t0 = time.perf_counter()
        fn()
        issue_us.append((time.perf_counter() - t0) * 1e6)
        drv.Context.synchronize()
    host_us = float(np.median(issue_us))
    hold = None
    if getattr(bench, "hold", True) and host_us <= HOLD_MAX_US:
        hold = hold_kernel()
        hold_ns = np.uint64(max(HOLD_MIN_US, 2.0 * host_us) * 1e3)
    samples: List[float] = []
    total = 0.0
    batch = 5
    while len(samples) < max_rep and (len(samples) < min_rep or total < min_ms):
        pairs = []
        for _ in range(min(batch, max_rep - len(samples))):
            start, end = drv.Event(), drv.Event()
            if hold is not None:
                hold((1,), (1,), hold_ns, stream=stream)
            start.record(stream)
            fn()
            end.record(stream)
            pairs.append((start, end))
        pairs[-1][1].synchronize()
        for start, end in pairs:
            dt = end.time_since(start)
            samples.append(dt)
            total += dt
        batch = min(50, batch * 2)
    return Timing.of(samples)


@dataclass
class Interleaved:
    """What :func:`time_interleaved` measured: one :class:`Timing` per function (all its samples)
    and, per function, the median of its samples in each round (the same rounds for all)."""
    timings: List[Timing]
    rounds: List[List[float]] = field(default_factory=list)

    def ratio(self, num: int, den: int) -> "Ratio":
        """Per-round ``rounds[num] / rounds[den]`` (e.g. baseline time over variant time)."""
        r = [a / b for a, b in zip(self.rounds[num], self.rounds[den]) if b > 0]
        return Ratio.of(r)


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


class _CpuClock:
    def warm(self, fn, n):
        t = []
        for _ in range(max(n, 1)):
            t0 = time.perf_counter()
            fn()
            t.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(t))

    def sample(self, fn, calls):
        out = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out


class _CudaClock:
    """Each call after a hold kernel on its stream, between CUDA events; the context is
    synchronised after a function's calls of a round, so functions on different streams never
    overlap."""

    def __init__(self, bench, streams):
        import pycuda.driver as drv
        self.drv = drv
        self.use_hold = getattr(bench, "hold", True)
        self.streams = streams
        self.hold_ns = {}
        self.hold = None

    def warm(self, fn, n, i=0):
        drv = self.drv
        issue, dev = [], []
        for _ in range(max(n, 1)):
            start, end = drv.Event(), drv.Event()
            t0 = time.perf_counter()
            start.record(self.streams[i])
            fn()
            end.record(self.streams[i])
            issue.append((time.perf_counter() - t0) * 1e6)
            drv.Context.synchronize()
            dev.append(end.time_since(start))
        host_us = float(np.median(issue))
        if self.use_hold and host_us <= HOLD_MAX_US:
            if self.hold is None:
                self.hold = hold_kernel()
            self.hold_ns[i] = np.uint64(max(HOLD_MIN_US, 2.0 * host_us) * 1e3)
        return float(np.median(dev))

    def sample(self, fn, calls, i=0):
        drv, stream = self.drv, self.streams[i]
        pairs = []
        for _ in range(calls):
            start, end = drv.Event(), drv.Event()
            if i in self.hold_ns:
                self.hold((1,), (1,), self.hold_ns[i], stream=stream)
            start.record(stream)
            fn()
            end.record(stream)
            pairs.append((start, end))
        drv.Context.synchronize()
        return [end.time_since(start) for start, end in pairs]


def time_interleaved(fns: Sequence[Callable[[], object]], bench, backend: str = "cpu",
                     streams: Optional[Sequence] = None) -> Interleaved:
    """Time several functions side by side, in rounds (see the module's docstring).

    Each function is warmed up ``warmup`` times, which also estimates its time ``t``. It should get
    ``n = clamp(ceil(min_time_ms / t), min_repeats, max_repeats)`` samples, as :func:`time_cpu`
    would give it alone; there are ``R = min(n)`` rounds (the slowest function's count), and a
    function is called ``ceil(n / R)`` times a round, so a fast kernel is not timed as rarely as a
    slow one nor a slow one as often as a fast one. Rounds are added (at most ``R`` more) while a
    function is short of ``min_time_ms`` because the warm-up underestimated it."""
    warmup, min_rep, max_rep, min_ms = _policy(bench)
    k = len(fns)
    if backend == "cuda":
        clock = _CudaClock(bench, list(streams) if streams is not None else [None] * k)
        warm = lambda i: clock.warm(fns[i], warmup, i)              # noqa: E731
        sample = lambda i, c: clock.sample(fns[i], c, i)            # noqa: E731
    else:
        clock = _CpuClock()
        warm = lambda i: clock.warm(fns[i], warmup)                 # noqa: E731
        sample = lambda i, c: clock.sample(fns[i], c)               # noqa: E731
    est = [warm(i) for i in range(k)]
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
            s = sample(i, calls[i])
            samples[i] += s
            rounds[i].append(float(np.median(s)))
        r += 1
    return Interleaved([Timing.of(s) for s in samples], rounds)


def timer_for(backend: str):
    return time_cuda if backend == "cuda" else time_cpu


class Interval:
    """Time one interval of work (e.g. a training epoch) on ``backend``: CUDA events on ``stream``
    (default: the stream our launches use, see pipeline.gpu.graphs.current_stream; ``stop`` waits
    for the device), ``perf_counter`` on the CPU. ``stop`` -> ms."""

    def __init__(self, backend: str, stream=None):
        self.cuda = backend == "cuda"
        self.stream = stream

    def start(self) -> None:
        if self.cuda:
            import pycuda.driver as drv
            from pipeline.gpu.graphs import current_stream
            if self.stream is None:
                self.stream = current_stream()
            self._a, self._b = drv.Event(), drv.Event()
            self._a.record(self.stream)
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        if self.cuda:
            self._b.record(self.stream)
            self._b.synchronize()
            return float(self._b.time_since(self._a))
        return (time.perf_counter() - self._t0) * 1e3
