"""The CUDA side of :mod:`pipeline.timing`: the hold kernel, CUDA-event timers of repeated calls
(:func:`time_cuda`, :class:`CudaClock` for interleaved rounds) and of intervals summed
(:class:`CudaIntervalSum`).

On the GPU the number is device time: before each timed call a short "hold" kernel
(``cuda/common/hold.cu``) keeps the stream busy while the host issues the call, so an idle GPU does
not count the host's launch latency (a few microseconds, which would otherwise dominate kernels that
take one or two). The hold lasts twice the host's issue time measured in the warm-up (at least
``HOLD_MIN_US``); calls that take the host longer than ``HOLD_MAX_US`` to issue (host-synchronising
work) are timed without it. ``bench.hold: false`` turns it off (then the host's issue time is
included). PyCUDA is imported when a timer is used, not when this module is.
"""
from __future__ import annotations

import time
from typing import Callable, List

import numpy as np

from pipeline.timing_policy import Timing, policy

HOLD_MIN_US = 20.0
HOLD_MAX_US = 2000.0


def hold_kernel():
    """``hold_ns(ns)``: one thread that spins for ``ns`` nanoseconds (launch it as ``(1,), (1,)``)."""
    from pipeline.gpu import kernels
    return kernels.load("common", "hold.cu").kernel("hold_ns", "Q")


def time_cuda(fn: Callable[[], object], bench, stream=None) -> Timing:
    """Time ``fn`` (which enqueues device work on ``stream``, default the null stream) with CUDA
    events recorded around every call (each after a hold kernel, see the module's docstring);
    events are read in batches so the host does not stall the queue between calls."""
    warmup, min_rep, max_rep, min_ms = policy(bench)
    clock = CudaClock(bench, [stream])
    clock.warm(fn, warmup)
    samples: List[float] = []
    batch = 5
    while len(samples) < max_rep and (len(samples) < min_rep or sum(samples) < min_ms):
        samples += clock.sample(fn, min(batch, max_rep - len(samples)))
        batch = min(50, batch * 2)
    return Timing.of(samples)


class CudaClock:
    """The GPU clock of :func:`time_cuda` and :func:`pipeline.timing.time_interleaved`: each call after a hold
    kernel on its stream, between CUDA events; the context is synchronised after a function's calls
    of a round, so functions on different streams never overlap."""

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


def _event(stream):
    import pycuda.driver as drv
    e = drv.Event()
    e.record(stream)
    return e


class CudaIntervalSum:
    """CUDA events around intervals on ``stream`` (default: the stream our launches use, see
    :func:`pipeline.gpu.graphs.current_stream`), recorded without waiting for the device;
    ``total_ms`` synchronises once and adds them up."""

    def __init__(self, stream=None):
        self.stream = stream
        self.pairs: List = []
        self.ms = 0.0

    def start(self):
        if self.stream is None:
            from pipeline.gpu.graphs import current_stream
            self.stream = current_stream()
        return _event(self.stream)

    def stop(self, token) -> None:
        self.pairs.append((token, _event(self.stream)))

    def total_ms(self) -> float:
        if self.pairs:
            self.pairs[-1][1].synchronize()
            self.ms += sum(float(b.time_since(a)) for a, b in self.pairs)
            self.pairs = []
        return self.ms

    def reset(self) -> None:
        self.pairs = []
        self.ms = 0.0

