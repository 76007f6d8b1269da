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
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, List

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
