"""CUDA graphs for PyCUDA + CuPy work, and the "current stream" our kernel launches default to.

PyCUDA 2026.1 has no graph API, so capture goes through the driver API (``libcuda`` via ctypes)
on a PyCUDA stream's handle: ``cuStreamBeginCapture_v2`` (relaxed mode), the work, then
``cuStreamEndCapture`` and ``cuGraphInstantiateWithFlags``. Inside :func:`on_stream` both our
kernels (:class:`pipeline.gpu.kernels.Kernel`) and CuPy (cuBLAS, cuFFT, element-wise kernels)
enqueue on that stream. Memory CuPy allocates during capture comes from a private pool owned by the
graph, so the addresses baked into the graph are never handed to anyone else.

A replay costs one launch instead of one Python call per kernel, which is what many small kernels
(a BCM layer's FFTs, products and bias kernels; SNIG's per-layer kernels) need to reach the GPU's
speed rather than the interpreter's.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from typing import Any, Callable, Optional

from pipeline.errors import GpuError

_tls = threading.local()
CAPTURE_MODE_RELAXED = 2


@functools.cache
def _cuda():
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise GpuError(f"{what} failed with CUDA driver error {rc}")


def current_stream():
    """The PyCUDA stream that launches default to (None: the legacy default stream)."""
    return getattr(_tls, "stream", None)


@contextlib.contextmanager
def on_stream(stream):
    """Make ``stream`` (a PyCUDA Stream) current for our kernels and for CuPy."""
    import cupy
    prev = current_stream()
    _tls.stream = stream
    try:
        with cupy.cuda.ExternalStream(stream.handle):
            yield
    finally:
        _tls.stream = prev


class Graph:
    """Capture ``fn()`` once; :meth:`launch` replays it and returns what ``fn`` returned (the same
    device arrays, rewritten by each replay). The graph holds ``fn`` for as long as it lives: the
    addresses baked into it are the buffers ``fn`` refers to (its inputs, plans, workspaces), and
    they must not go back to the allocator while a replay can still read them."""

    def __init__(self, fn: Callable[[], Any], stream=None):
        import cupy
        import pycuda.driver as drv

        self.stream = stream or drv.Stream()
        self.pool = cupy.cuda.MemoryPool()
        lib = _cuda()
        h = ctypes.c_void_p(self.stream.handle)
        graph = ctypes.c_void_p()
        with on_stream(self.stream), cupy.cuda.using_allocator(self.pool.malloc):
            _check(lib.cuStreamBeginCapture_v2(h, CAPTURE_MODE_RELAXED), "cuStreamBeginCapture")
            try:
                out = fn()
            except BaseException:
                lib.cuStreamEndCapture(h, ctypes.byref(graph))
                if graph.value:
                    lib.cuGraphDestroy(graph)
                raise
            _check(lib.cuStreamEndCapture(h, ctypes.byref(graph)), "cuStreamEndCapture")
        self.graph = graph
        self.fn = fn            # keeps alive every buffer the captured work reads
        self.exec = ctypes.c_void_p()
        _check(lib.cuGraphInstantiateWithFlags(ctypes.byref(self.exec), graph, ctypes.c_ulonglong(0)),
               "cuGraphInstantiate")
        self.outputs = out

    def launch(self) -> Any:
        _check(_cuda().cuGraphLaunch(self.exec, ctypes.c_void_p(self.stream.handle)), "cuGraphLaunch")
        return self.outputs

    def __del__(self):
        try:
            lib = _cuda()
            if getattr(self, "exec", None) is not None and self.exec.value:
                lib.cuGraphExecDestroy(self.exec)
            if getattr(self, "graph", None) is not None and self.graph.value:
                lib.cuGraphDestroy(self.graph)
        except Exception:
            pass


_side: list = []


def side_streams(n: int) -> list:
    """``n`` side streams, created on first use and reused afterwards (also inside captures)."""
    import pycuda.driver as drv
    while len(_side) < n:
        _side.append(drv.Stream())
    return _side[:n]


def side_stream_ptrs() -> set:
    return {s.handle for s in _side}


def parallel(*fns: Callable[[], Any]) -> list:
    """Run each ``fn`` on its own side stream, after the work queued so far on the current stream,
    and make the current stream wait for all of them (fork/join; inside a capture this gives the
    graph parallel branches). Returns the functions' results. A branch that calls cuBLAS gets its
    own handle (:mod:`pipeline.gpu.blas` keeps one per stream)."""
    import pycuda.driver as drv
    main = current_stream()
    streams = side_streams(len(fns))
    flags = drv.event_flags.DISABLE_TIMING
    if main is not None:
        fork = drv.Event(flags)
        fork.record(main)
    outs, joins = [], []
    for fn, s in zip(fns, streams):
        if main is not None:       # (side streams are blocking: the legacy stream orders them itself)
            s.wait_for_event(fork)
        with on_stream(s):
            outs.append(fn())
        if main is not None:
            e = drv.Event(flags)
            e.record(s)
            joins.append(e)
    for e in joins:
        main.wait_for_event(e)
    return outs


def try_capture(fn: Callable[[], Any], notice: Optional[Callable[[str], None]] = None, name: str = ""):
    """A replay function for ``fn`` through a CUDA graph, or ``fn`` itself (with a notice) when the
    work cannot be captured (a host synchronisation inside it, say)."""
    try:
        g = Graph(fn)
    except Exception as e:   # capture refused: run eagerly
        import pycuda.driver as drv
        with contextlib.suppress(Exception):
            drv.Context.synchronize()
        if notice:
            notice(f"{name}: CUDA graph capture failed ({str(e).splitlines()[0][:160]}); timing eager launches")
        return fn, False
    return g.launch, True
