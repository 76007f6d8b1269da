"""Host <-> device transfers: pinned host buffers, streams, and a pipelined chunk feeder.

Everything that crosses PCIe goes through here. Device arrays are CuPy arrays (they share the
primary context with our PyCUDA kernels, see :mod:`pipeline.gpu.device`).

:class:`ChunkFeeder` streams a sequence of host chunks to the device through ``depth`` device
buffers on a copy stream, so that the copy of chunk ``i + depth - 1`` overlaps the compute on chunk
``i`` (double buffering with depth 2, triple with 3). Each buffer is reused only after the compute
that read it has finished (an event per buffer).
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Sequence, Tuple

import numpy as np


def pinned_like(a: np.ndarray) -> np.ndarray:
    """A page-locked copy of ``a`` (needed for truly asynchronous copies)."""
    import pycuda.driver as drv
    out = drv.pagelocked_empty(a.shape, a.dtype)
    out[...] = a
    return out


def stream():
    import pycuda.driver as drv
    return drv.Stream()


def cupy_stream(s):
    """A CuPy view of a PyCUDA stream, to queue CuPy work on it (``with cupy_stream(s): ...``)."""
    import cupy
    return cupy.cuda.ExternalStream(s.handle if s is not None else 0)


def to_device(a: np.ndarray, s=None):
    """Copy a host array to a new device array (asynchronously on ``s`` when ``a`` is pinned)."""
    import cupy
    a = np.ascontiguousarray(a)
    d = cupy.empty(a.shape, a.dtype)
    if s is None:
        d.set(a)
    else:
        import pycuda.driver as drv
        drv.memcpy_htod_async(int(d.data.ptr), a, s)
    return d


def to_host(d) -> np.ndarray:
    """Device (or host) array to NumPy; synchronous."""
    if isinstance(d, np.ndarray):
        return d
    import cupy
    return cupy.asnumpy(d)


def upload_all(arrays: Dict[str, np.ndarray]) -> Dict[str, object]:
    """Copy a dict of host arrays to the device through pinned staging on one stream."""
    s = stream()
    pinned = {k: pinned_like(np.ascontiguousarray(v)) for k, v in arrays.items()}
    out = {k: to_device(v, s) for k, v in pinned.items()}
    s.synchronize()
    return out


class ChunkFeeder:
    """Overlap host->device copies of ``chunks`` with compute.

    ``for i, dev_buffers in feeder: compute(dev_buffers, stream=feeder.compute_stream)`` where each
    chunk is a tuple of pinned host arrays of at most the shapes given to the constructor. The
    compute for chunk i must be enqueued on ``feeder.compute_stream`` before the next iteration.
    """

    def __init__(self, chunks: Sequence[Tuple[np.ndarray, ...]], depth: int = 2):
        import cupy
        import pycuda.driver as drv

        if depth < 1:
            raise ValueError("depth must be >= 1")
        self.chunks = chunks
        self.depth = depth
        self.copy_stream = drv.Stream()
        self.compute_stream = drv.Stream()
        first = chunks[0]
        cap = [max(c[j].nbytes for c in chunks) for j in range(len(first))]
        self.buffers = [[cupy.empty(cap[j] // first[j].itemsize + 1, first[j].dtype) for j in range(len(first))]
                        for _ in range(depth)]
        self.copied = [drv.Event() for _ in range(depth)]
        self.consumed = [None] * depth

    def _copy(self, i: int) -> None:
        import pycuda.driver as drv
        slot = i % self.depth
        if self.consumed[slot] is not None:
            self.copy_stream.wait_for_event(self.consumed[slot])
        for buf, host in zip(self.buffers[slot], self.chunks[i]):
            drv.memcpy_htod_async(int(buf.data.ptr), host, self.copy_stream)
        self.copied[slot].record(self.copy_stream)

    def __iter__(self) -> Iterator[Tuple[int, List[object]]]:
        import pycuda.driver as drv
        n = len(self.chunks)
        for i in range(min(self.depth, n)):
            self._copy(i)
        for i in range(n):
            slot = i % self.depth
            self.compute_stream.wait_for_event(self.copied[slot])
            views = [buf[: host.size].reshape(host.shape) for buf, host in zip(self.buffers[slot], self.chunks[i])]
            yield i, views
            ev = drv.Event()
            ev.record(self.compute_stream)
            self.consumed[slot] = ev
            if i + self.depth < n:
                self._copy(i + self.depth)
        self.compute_stream.synchronize()
