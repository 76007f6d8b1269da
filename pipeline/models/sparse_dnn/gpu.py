"""GPU variants of model=sparse_dnn: snig (the paper's kernel, weights streamed through nb device
buffers, the per-batch pass captured once as a CUDA graph), pull (the batch transposed and
compacted on the device, image-tiled pulls over CSC weights, streamed and captured the same way),
bf (host-side row compaction every layer) and cusparse (cuSPARSE SpMM through CuPy, same
semantics and row skipping).

Every variant returns the 0-based categories of all images plus the nonzero-row count after each
layer; timings come from the runner's device (the pass is synchronous at its end). ``run(b0, b1)``
runs only the images [b0, b1) (in batches of the runner's size) and returns their categories: the
multi-GPU workers (multi.py) call it for the batches they claim.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
import scipy.sparse as sp

from pipeline.errors import GpuError
from pipeline.gpu.graphs import Graph
from pipeline.models.sparse_dnn.network import batches as _batches

MODEL_DIR = "sparse_dnn"


def sections(N: int, smem_bytes: int, num_secs: int = 0, elem: int = 8) -> int:
    """The paper's section count: 1 if a row's sums (``elem`` bytes each: 8, snig's 64-bit
    fixed-point sums) fit the shared memory, else the smallest divisor d of N with N/d sums fitting."""
    if num_secs:
        return num_secs
    cap = smem_bytes // elem
    if N <= cap:
        return 1
    for d in range(2, N + 1):
        if N % d == 0 and N // d <= cap:
            return d
    raise GpuError(f"N={N} cannot be sectioned into {smem_bytes} bytes of shared memory")


# ------------------------------------------------------------------------------ packing (host)

def _pinned(shape, dtype):
    import pycuda.driver as drv
    return drv.pagelocked_empty(shape, dtype)


def col_abs_max(W: sp.csr_matrix) -> float:
    """The largest column sum of |W| (W[i, j]: input i -> output j)."""
    if not W.nnz:
        return 0.0
    return float(np.bincount(W.indices, weights=np.abs(W.data.astype(np.float64)), minlength=W.shape[1]).max())


def _pack_sectioned_row(W: sp.csr_matrix, S: int, row: np.ndarray, cap: int) -> None:
    """Layer W into ``row`` = [col_w (S*N+1) | row_w (cap) | val (cap)] (see :func:`pack_sectioned`).
    No sort: within a CSR row (sorted j) each section's entries are contiguous, so entry k goes to
    k + (start of its (section, row) group in the sectioned order - its start in CSR order)."""
    N = W.shape[0]
    W = W if W.has_sorted_indices else W.sorted_indices()
    nnz = W.nnz
    vals = W.data.astype(np.float32, copy=False).view(np.int32)
    if S == 1:
        row[: N + 1] = W.indptr
        row[N + 1: N + 1 + nnz] = W.indices
        row[N + 1 + cap: N + 1 + cap + nnz] = vals
        return
    sec = N // S
    j = W.indices
    indptr = W.indptr.astype(np.int64, copy=False)
    t = j // np.int32(sec) if j.dtype == np.int32 else (j // sec).astype(np.int64)
    i = np.repeat(np.arange(N, dtype=np.int32), np.diff(indptr))
    key = t.astype(np.int64) * N + i
    counts = np.bincount(key, minlength=S * N).reshape(S, N)
    ptr = np.zeros(S * N + 1, np.int64)
    np.cumsum(counts.ravel(), out=ptr[1:])
    first = (np.cumsum(counts, axis=0) - counts) + indptr[:-1][None, :]     # group start in CSR order
    dest = np.arange(nnz, dtype=np.int64) + (ptr[:-1] - first.ravel())[key]
    row[: S * N + 1] = ptr
    row[S * N + 1: S * N + 1 + nnz][dest] = j
    row[S * N + 1 + cap: S * N + 1 + cap + nnz][dest] = vals


def _pack(layers, stride_of, fill, alloc, workers: int, progress, desc: str):
    """Allocate (L, stride) int32 (pinned unless ``alloc``) and fill each layer's row on ``workers``
    threads, straight from the layers (a lazy RadiX-Net is generated inside the same threads, so no
    list of CSR matrices is ever held beside the packed copy)."""
    from pipeline.data.radixnet import layer_imap, max_nnz
    N = layers[0].shape[0]
    cap = max_nnz(layers)
    stride = -(-stride_of(N, cap) // 32) * 32
    out = (alloc or _pinned)((len(layers), stride), np.int32)
    for _ in layer_imap(layers, lambda l, W: fill(W, out[l], cap, l), workers, progress, desc):
        pass
    return out, cap


def pack_sectioned(layers: List[sp.csr_matrix], S: int, alloc=None, workers: int = 0,
                   progress=None, colmax: Optional[np.ndarray] = None) -> Tuple[np.ndarray, int]:
    """(L, stride) int32 array (pinned unless ``alloc`` says otherwise), one row per layer:
    [col_w (S*N+1) | row_w (cap) | val (cap)]. Row t*N + i of the sectioned CSR lists input
    neuron i's targets j inside output section t = j // sec, sorted by j. Layers are packed on
    ``workers`` threads (0: up to 16). ``colmax[l]`` (if given) gets layer l's :func:`col_abs_max`."""
    def fill(W, row, cap, l):
        _pack_sectioned_row(W, S, row, cap)
        if colmax is not None:
            colmax[l] = col_abs_max(W)
    return _pack(layers, lambda N, cap: S * N + 1 + 2 * cap, fill, alloc, workers, progress, f"pack snig (S={S})")


def _pack_csc_row(W: sp.csr_matrix, row: np.ndarray, cap: int, l: int = 0) -> None:
    N = W.shape[0]
    C = sp.csc_matrix(W)
    C.sort_indices()
    row[: N + 1] = C.indptr
    row[N + 1: N + 1 + C.nnz] = C.indices
    row[N + 1 + cap: N + 1 + cap + C.nnz] = C.data.astype(np.float32).view(np.int32)


def pack_csc(layers: List[sp.csr_matrix], alloc=None, workers: int = 0, progress=None) -> Tuple[np.ndarray, int]:
    """(L, stride) int32 (pinned unless ``alloc``): [colptr (N+1) | rowidx (cap) | val (cap)] (= CSR of W^T)."""
    return _pack(layers, lambda N, cap: N + 1 + 2 * cap, _pack_csc_row, alloc, workers, progress, "pack CSC")


CL_G = 16                         # outputs per cluster (cuda/sparse_dnn/cluster.cu)


_MIX = np.random.default_rng(0x5eed).integers(1, 2 ** 63, 4096, dtype=np.uint64) | np.uint64(1)


def _same_lists(M: np.ndarray) -> np.ndarray:
    """Group label of each row of M (n x d int): equal rows, equal labels. A 64-bit mix of each row
    is sorted (fast), and rows that share a mix are compared with the first of their group; only on
    a collision does it fall back to an exact sort of the rows (numpy.unique over axis 0)."""
    d = M.shape[1]
    mix = _MIX[np.arange(d) % _MIX.size]
    with np.errstate(over="ignore"):
        h = (M.astype(np.uint64) * mix[None, :]).sum(axis=1, dtype=np.uint64)
    h ^= h >> np.uint64(29)
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = np.asarray(inv).ravel()
    if np.array_equal(M, M[first[inv]]):
        return inv
    _, inv = np.unique(M, axis=0, return_inverse=True)
    return np.asarray(inv).ravel()


def cluster_layer(W: sp.csr_matrix, g: int = CL_G) -> Tuple[np.ndarray, int, int]:
    """Layer W (input i -> output j) in the cluster layout of cuda/sparse_dnn/cluster.cu: (int32
    words wval (utot x g float32) | uidx (utot) | uptr (ncl + 1) | gidx (ncl x g, -1 = none),
    ncl, utot).

    Output neurons with the same in-neighbour list (same degree, same sorted inputs) are grouped,
    each group cut into clusters of at most ``g`` outputs; a cluster stores the shared list once
    (CSC order) and the dense block of its outputs' weights, so the kernel reads each input row
    once per cluster. Outputs with no in-edges form clusters with an empty list (their rows are
    written as zeros). Grouping is exact: an output's sum runs over exactly its own in-edges in
    CSC order, the same float32 chain as pull's. A network whose outputs share no lists gets one
    output per cluster (correct, but no faster than pull)."""
    C = sp.csc_matrix(W)
    C.sort_indices()
    ip = C.indptr.astype(np.int64)
    deg = np.diff(ip)
    gidx, uidx, wval, sizes = [], [], [], []
    for d in np.unique(deg):
        js = np.flatnonzero(deg == d)
        pos = ip[js][:, None] + np.arange(d, dtype=np.int64)[None, :]        # (n, d) entry positions
        inv = _same_lists(C.indices[pos]) if d else np.zeros(js.size, np.int64)
        order = np.argsort(inv, kind="stable")
        inv, js, pos = inv[order], js[order], pos[order]
        first = np.r_[0, np.flatnonzero(np.diff(inv)) + 1]                    # start of each group
        start = np.repeat(first, np.diff(np.r_[first, inv.size]))
        col = (np.arange(inv.size) - start) % g
        cl = np.cumsum(col == 0) - 1                                          # cluster of each output
        ncl = int(cl[-1]) + 1
        G = np.full((ncl, g), -1, np.int32)
        G[cl, col] = js
        V = np.zeros((ncl, d, g), np.float32)
        V[cl, :, col] = C.data[pos].astype(np.float32)
        gidx.append(G.ravel())
        uidx.append(C.indices[pos[col == 0]].astype(np.int32).ravel())      # the shared list, once
        wval.append(V.ravel())
        sizes.append(np.full(ncl, d, np.int64))
    sizes = np.concatenate(sizes)
    uptr = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=uptr[1:])
    ncl, utot = int(sizes.size), int(uptr[-1])
    words = np.concatenate([np.concatenate(wval).view(np.int32), np.concatenate(uidx),
                            uptr.astype(np.int32), np.concatenate(gidx)])
    return words, ncl, utot


def pack_clusters(layers, alloc=None, workers: int = 0, progress=None) -> Tuple[np.ndarray, np.ndarray]:
    """(L, stride) int32 (pinned unless ``alloc``), row l = layer l's :func:`cluster_layer` words (zero
    padded), and (L, 2) int64: (ncl, utot) of each layer. Layers are clustered on ``workers``
    threads; the rows are held until all are done (their sizes set the stride), then copied in,
    each given back once copied."""
    from pipeline.data.radixnet import layer_imap
    rows, counts = [], []
    for r, ncl, utot in layer_imap(layers, lambda l, W: cluster_layer(W), workers, progress, "pack clusters"):
        rows.append(r)
        counts.append((ncl, utot))
    stride = -(-max(r.size for r in rows) // 32) * 32
    out = (alloc or _pinned)((len(rows), stride), np.int32)
    for l in range(len(rows)):
        out[l, :rows[l].size] = rows[l]
        out[l, rows[l].size:] = 0
        rows[l] = None
    return out, np.asarray(counts, np.int64)


def cluster_bytes(N: int, L: int, g: int = CL_G) -> int:
    """Bytes of :func:`pack_clusters` for a RadiX-Net layer (N/g clusters, each a shared list of 32
    inputs): the estimate the host-memory notice uses."""
    ncl, utot = N // g, 2 * N
    words = (g + 1) * utot + ncl + 1 + ncl * g
    return -(-words // 32) * 32 * 4 * L


def fixed_point_bits(net, colmax: float) -> int:
    """K of snig's 64-bit fixed-point sums (quantum 2^-K): the largest K that keeps every sum,
    at most max(ymax, largest input) x ``colmax`` (largest column sum of |W|) + |bias|, below 2^62."""
    ymax = max(float(net.ymax), float(np.abs(net.Y0.data).max()) if net.Y0.nnz else 0.0)
    amax = ymax * colmax + abs(float(net.bias))
    if amax <= 0:
        return 60
    return int(max(0, min(60, np.floor(62 - np.log2(amax)) - 1)))


def packed_bytes(N: int, L: int, cap: int, S: int = 0) -> int:
    """Bytes of :func:`pack_sectioned` (S > 0) or :func:`pack_csc` (S = 0) for L layers."""
    words = (S * N + 1 if S else N + 1) + 2 * cap
    return -(-words // 32) * 32 * 4 * L


def _packed(kind: str, layers, notice, pack):
    """Run ``pack()`` and say what it took (a network of > 1 GB takes seconds to pin and fill)."""
    t0 = time.perf_counter()
    out, cap = pack()
    dt = time.perf_counter() - t0
    if out.nbytes > (1 << 30) and notice:
        notice(f"{kind}: packed {len(layers)} layers into {out.nbytes / 1e9:.1f} GB of pinned host memory "
               f"in {dt:.1f} s")
    return out, cap, dt


# ------------------------------------------------------------------------------ CUDA graphs

# ------------------------------------------------------------------------------ common state

@dataclass
class Result:
    categories: np.ndarray
    rows: np.ndarray                       # nonzero rows after each layer (profiled pass) or empty
    transfer_ms: float = float("nan")      # sum of the weight copies (profiled pass)
    compute_ms: float = float("nan")       # sum of the layer kernels (profiled pass)
    info: Dict[str, object] = field(default_factory=dict)


def _device_inputs(Y0: sp.csr_matrix):
    import cupy
    return (cupy.asarray(Y0.indptr.astype(np.int64)), cupy.asarray(Y0.indices.astype(np.int32)),
            cupy.asarray(Y0.data.astype(np.float32)))


class _Digest:
    """Bit-for-bit comparison of passes (cuda/sparse_dnn/digest.cu): with ``track`` on, a pass
    leaves ``digest`` = a 64-bit digest of every image's final activations (their values and
    positions, whatever the layout); with ``keep_final`` on, it keeps them (images x N, device)
    for :meth:`activations`. Both are off in timed passes."""

    track = False
    keep_final = False
    digest: Optional[int] = None

    def _digest_setup(self) -> None:
        import cupy
        from pipeline.gpu import kernels
        self.k_digest = kernels.load(MODEL_DIR, "digest.cu").kernel("digest_f32", "PiPiqqPqP")
        self.digest_acc = cupy.zeros(1, np.uint64)
        self.finals: List[tuple] = []

    def _pass_begin(self, stream=None) -> None:
        from pipeline.gpu.transfer import cupy_stream
        if self.track:
            with cupy_stream(stream):
                self.digest_acc.fill(0)
        if self.keep_final:
            self.finals = []

    def _digest_of(self, Y, rows, count, ld_row, ld_col, ids, b0, stream=None) -> None:
        self.k_digest((1024,), (256,), Y, np.int32(rows), count, np.int32(self.N), np.int64(ld_row),
                      np.int64(ld_col), ids, np.int64(b0), self.digest_acc, stream=stream)

    def _pass_end(self) -> None:
        if self.track:
            self.digest = int(self.digest_acc.get()[0])

    def activations(self):
        """The final activations of every image of the last pass run with ``keep_final`` (a
        CuPy float32 array, images x N)."""
        import cupy
        parts = [a for _, a in sorted(self.finals, key=lambda t: t[0])]
        return cupy.concatenate(parts) if parts else cupy.zeros((0, self.N), np.float32)


class _StreamedPass(_Digest):
    """What snig and pull share: weights streamed from pinned host memory through nb device buffers
    on a copy stream (copy[l] -> layer[l] on the compute stream, with the write-after-read guard
    layer[l] -> copy[l + nb]), each batch's pass over the layers captured once as a CUDA graph
    (per batch size) and replayed; a subclass supplies ``name``, ``_stage``, ``_layer`` and ``_collect``."""

    name: str

    def _streams(self, cfg_model, host_w, notice) -> None:
        import cupy
        import pycuda.driver as drv
        self.nb = max(1, min(int(cfg_model.weight_buffers), self.L))
        self.n = self.net.images
        self.batch = min(int(cfg_model.batch_size) or self.n, self.n)
        self.use_graph = bool(cfg_model.graph)
        self.notice = notice
        self.host_w = host_w
        self.wbuf = [cupy.empty(self.host_w.shape[1], np.int32) for _ in range(self.nb)]
        self.out_flags = cupy.zeros(self.n, np.uint8)
        self.inp = _device_inputs(self.net.Y0)
        self.compute = drv.Stream()
        self.copy = drv.Stream()
        ev = lambda: drv.Event(drv.event_flags.DISABLE_TIMING)   # noqa: E731
        self.copied = [ev() for _ in range(self.nb)]
        self.consumed = [ev() for _ in range(self.nb)]
        self.start_ev = ev()
        self.graphs: Dict[int, Graph] = {}
        self.bias, self.ymax = np.float32(self.net.bias), np.float32(self.net.ymax)
        self._digest_setup()

    def _after(self, b0: int, b1: int) -> None:
        """After a batch's categories: its digest and final activations when asked for."""
        if self.track:
            self._digest(b0, b1)
        if self.keep_final:
            self.finals.append((b0, self._final(b0, b1)))

    def _copy(self, l: int, timing=None) -> None:
        import pycuda.driver as drv
        slot = l % self.nb
        if timing is not None:
            timing[0][l].record(self.copy)
        drv.memcpy_htod_async(int(self.wbuf[slot].data.ptr), self.host_w[l], self.copy)
        if timing is not None:
            timing[1][l].record(self.copy)
        self.copied[slot].record(self.copy)

    def _pass(self, rows: int, timing=None, trace=None) -> None:
        """One pass over the layers for the staged batch of ``rows`` rows."""
        self.start_ev.record(self.compute)
        self.copy.wait_for_event(self.start_ev)
        for l in range(min(self.nb, self.L)):
            self._copy(l, timing)
        for l in range(self.L):
            slot = l % self.nb
            self.compute.wait_for_event(self.copied[slot])
            if timing is not None:
                timing[2][l].record(self.compute)
            self._layer(l, slot, rows, trace)
            if timing is not None:
                timing[3][l].record(self.compute)
            self.consumed[slot].record(self.compute)
            if l + self.nb < self.L:
                self.copy.wait_for_event(self.consumed[slot])
                self._copy(l + self.nb, timing)

    def run(self, lo: int = 0, hi: Optional[int] = None) -> np.ndarray:
        """Images [lo, hi) (default all) in batches, timed by the caller; their 0-based categories."""
        hi = self.n if hi is None else hi
        self._pass_begin(self.compute)
        for b0, b1 in _batches(hi, self.batch, lo):
            rows = b1 - b0
            self._stage(b0, b1)
            if self.use_graph:
                g = self.graphs.get(rows)
                if g is None:
                    try:
                        g = Graph(lambda: self._pass(rows), stream=self.compute)
                        self.graphs[rows] = g
                    except Exception as e:     # refused capture: fall back to stream launches
                        self.use_graph = False
                        self.notice(f"{self.name}: CUDA graph capture refused ({e}); using plain stream launches")
                if g is not None:
                    g.launch()
                else:
                    self._pass(rows)
            else:
                self._pass(rows)
            self._collect(b0, b1)
            self._after(b0, b1)
        self.compute.synchronize()
        self._pass_end()
        return np.flatnonzero(self.out_flags[lo:hi].get()).astype(np.int64) + lo

    def _profiled(self, trace=None):
        """One instrumented pass over every batch (no graph): (categories, copy ms, kernel ms)."""
        import pycuda.driver as drv
        c_ms, k_ms = 0.0, 0.0
        self._pass_begin(self.compute)
        for b0, b1 in _batches(self.n, self.batch):
            rows = b1 - b0
            timing = [[drv.Event() for _ in range(self.L)] for _ in range(4)]
            self._stage(b0, b1)
            self._pass(rows, timing, trace)
            self._collect(b0, b1)
            self._after(b0, b1)
            self.compute.synchronize()
            self.copy.synchronize()
            c_ms += sum(timing[1][l].time_since(timing[0][l]) for l in range(self.L))
            k_ms += sum(timing[3][l].time_since(timing[2][l]) for l in range(self.L))
        self._pass_end()
        return np.flatnonzero(self.out_flags.get()).astype(np.int64), c_ms, k_ms


class SnigRunner(_StreamedPass):
    """The paper's pipeline on one GPU: per batch, stage inputs (outside the graph), then the L
    layers of the snig kernel (dense rows x N batch, per-(row, section) nonzero flags)."""

    name = "snig"

    def __init__(self, net, cfg_model, info, notice=print):
        import cupy
        from pipeline.gpu import kernels

        self.net = net
        self.N, self.L = net.N, net.L
        limit = info.smem_per_block_optin - 1024 if cfg_model.smem_optin else 48 * 1024
        self.R = int(cfg_model.get("rows_per_block", 1))
        self.S = sections(self.N, limit // self.R, int(cfg_model.num_secs))
        self.sec = self.N // self.S
        if self.R * self.sec * 8 > info.smem_per_block_optin:
            raise GpuError(f"model.num_secs={self.S}: {self.R} row(s) of a {self.sec}-sum section (8 bytes a sum) "
                           f"need {self.R * self.sec * 8} B of shared memory, the device allows "
                           f"{info.smem_per_block_optin}; raise model.num_secs or lower model.rows_per_block")
        self.bx, self.by = (int(b) for b in cfg_model.block)
        mod = kernels.load(MODEL_DIR, "snig.cu")
        self.k_infer = mod.kernel("snig_infer", "PPPPPiiiiffdd")
        self.k_rows = mod.kernel("snig_infer_rows", "PPPPPiiiiffiidd")
        self.k_stage = mod.kernel("stage_rows", "PPPqiiiPP")
        self.k_flags = mod.kernel("row_flags", "PiiPq")
        self.shared = 8 * self.sec * self.R
        if self.shared > 48 * 1024:
            (self.k_rows if self.R > 1 else self.k_infer).allow_shared(self.shared)
        colmax = np.zeros(self.L)
        host_w, self.cap, self.pack_s = _packed(f"snig (S={self.S})", net.layers, notice,
                                                lambda: pack_sectioned(net.layers, self.S, colmax=colmax))
        self.K = fixed_point_bits(net, float(colmax.max()))
        if self.K < 50:
            notice(f"snig: 64-bit fixed-point sums with a quantum of 2^-{self.K} (weights this large); the "
                   f"rounding-ambiguity bound assumes 2^-50 or finer")
        self.scale, self.inv = np.float64(2.0 ** self.K), np.float64(2.0 ** -self.K)
        self._streams(cfg_model, host_w, notice)
        B, N, S = self.batch, self.N, self.S
        try:
            self.Y = [cupy.empty((B, N), np.float32), cupy.empty((B, N), np.float32)]
        except cupy.cuda.memory.OutOfMemoryError as e:
            raise GpuError(f"two {B} x {N} float32 result buffers do not fit on the GPU; lower "
                           f"model.batch_size") from e
        self.F = [cupy.zeros((B, S), np.uint8), cupy.ones((B, S), np.uint8)]
        self.Y[1].fill(np.nan)            # poisoned: its flags are all 1, which the invariant allows

    def _layer(self, l: int, slot: int, rows: int, trace=None) -> None:
        src, dst = l % 2, (l + 1) % 2
        if self.R > 1:
            self.k_rows((-(-rows // self.R), self.S), (self.bx, self.by), self.Y[src], self.F[src], self.Y[dst],
                        self.F[dst], self.wbuf[slot], np.int32(self.N), np.int32(self.S), np.int32(self.sec),
                        np.int32(self.cap), self.bias, self.ymax, np.int32(rows), np.int32(self.R),
                        self.scale, self.inv, shared=self.shared, stream=self.compute)
        else:
            self.k_infer((rows, self.S), (self.bx, self.by), self.Y[src], self.F[src], self.Y[dst], self.F[dst],
                         self.wbuf[slot], np.int32(self.N), np.int32(self.S), np.int32(self.sec),
                         np.int32(self.cap), self.bias, self.ymax, self.scale, self.inv, shared=self.shared,
                         stream=self.compute)
        if trace is not None:
            trace(l, self.F[dst], rows)

    def _stage(self, b0: int, b1: int) -> None:
        from pipeline.gpu.transfer import cupy_stream
        rows = b1 - b0
        with cupy_stream(self.compute):
            self.Y[0][:rows].fill(0)
            self.F[0][:rows].fill(0)
        ip, ix, dv = self.inp
        self.k_stage((rows,), (128,), ip, ix, dv, np.int64(b0), np.int32(self.N), np.int32(self.S),
                     np.int32(self.sec), self.Y[0], self.F[0], stream=self.compute)

    def _collect(self, b0: int, b1: int) -> None:
        out = (self.L % 2)
        rows = b1 - b0
        self.k_flags((-(-rows // 256),), (256,), self.F[out], np.int32(rows), np.int32(self.S),
                     self.out_flags, np.int64(b0), stream=self.compute)

    def _digest(self, b0: int, b1: int) -> None:
        self._digest_of(self.Y[self.L % 2], b1 - b0, None, self.N, 1, None, b0, self.compute)

    def _final(self, b0: int, b1: int):
        from pipeline.gpu.transfer import cupy_stream
        with cupy_stream(self.compute):
            return self.Y[self.L % 2][: b1 - b0].copy()      # an empty row's flags reset it: zeros

    def profile(self) -> Result:
        """One instrumented pass (no graph): per-layer copy and kernel times, nonzero rows per layer."""
        import cupy
        from pipeline.gpu.transfer import cupy_stream
        counts = cupy.zeros(self.L, np.int64)

        def trace(l, F, rows):
            with cupy_stream(self.compute):
                counts[l] += F[:rows].any(axis=1).sum()
        cats, c_ms, k_ms = self._profiled(trace)
        return Result(cats, cupy.asnumpy(counts), c_ms, k_ms,
                      info={"num_secs": self.S, "sec_size": self.sec, "rows_per_block": self.R, "batch": self.batch, "nb": self.nb,
                            "pack_s": self.pack_s, "graph": self.use_graph, "fixed_bits": self.K})


class PullRunner(_StreamedPass):
    """Variant pull (cuda/sparse_dnn/pull.cu): the batch transposed (N x live images) and compacted
    after every layer on the device; a warp computes one output neuron for 128 images by pulling
    its in-edges (CSC weights, streamed and graph-captured like snig's)."""

    name = "pull"
    THREADS = 256                 # pull_infer block (8 warps)

    def __init__(self, net, cfg_model, info, notice=print):
        import cupy
        from pipeline.gpu import kernels
        self.net = net
        self.N, self.L = net.N, net.L
        self.jpw = int(cfg_model.get("pull_neurons_per_warp", 4))
        mod = kernels.load(MODEL_DIR, "pull.cu")
        self.k_infer = mod.kernel("pull_infer", "PPPPPiiiiff")
        self.k_compact = mod.kernel("pull_compact", "PPPPPi")
        self.k_gather = mod.kernel("pull_gather", "PPPii")
        self.k_stage = mod.kernel("pull_stage", "PPPqiiPPPP")
        self.k_collect = mod.kernel("pull_collect", "PPPq")
        per_sm = max(1, 65536 // (max(self.k_infer.registers, 1) * self.THREADS))
        self.grid = info.sm_count * min(per_sm, 8)
        self.gather_grid = info.sm_count * 8
        host_w, self.cap, self.pack_s = self._load_layers(net, cfg_model, info, notice)
        self._streams(cfg_model, host_w, notice)
        self.ld = -(-self.batch // 128) * 128
        try:
            self.Y = [cupy.empty((self.N, self.ld), np.float32), cupy.empty((self.N, self.ld), np.float32)]
        except cupy.cuda.memory.OutOfMemoryError as e:
            raise GpuError(f"two {self.N} x {self.ld} float32 result buffers do not fit on the GPU; lower "
                           f"model.batch_size") from e
        self.Y[1].fill(np.nan)            # never read outside the live columns
        self.alive = cupy.zeros(self.ld, np.int32)
        self.ids = cupy.zeros(self.ld, np.int32)
        self.src = cupy.zeros(self.ld, np.int32)
        self.state = cupy.zeros(2, np.int32)
        self.hist = cupy.zeros(self.L + 1, np.int32)

    def _load_layers(self, net, cfg_model, info, notice):
        """(pinned (L, stride) int32 layers, cap, packing seconds): CSC for pull."""
        return _packed("pull (CSC)", net.layers, notice, lambda: pack_csc(net.layers))

    def _compact(self, Y, layer: int) -> None:
        self.k_compact((1,), (1024,), self.state, self.alive, self.ids, self.src, self.hist, np.int32(layer),
                       stream=self.compute)
        self.k_gather((self.gather_grid,), (256,), Y, self.state, self.src, np.int32(self.N), np.int32(self.ld),
                      stream=self.compute)

    def _stage(self, b0: int, b1: int) -> None:
        from pipeline.gpu.transfer import cupy_stream
        with cupy_stream(self.compute):
            self.Y[0].fill(0)
            self.out_flags[b0:b1].fill(0)         # pull_collect only sets the categories
        ip, ix, dv = self.inp
        self.k_stage((b1 - b0,), (128,), ip, ix, dv, np.int64(b0), np.int32(b1 - b0), np.int32(self.ld),
                     self.Y[0], self.alive, self.ids, self.state, stream=self.compute)
        self._compact(self.Y[0], self.L)          # drop empty inputs; hist[L] counts the live inputs

    def _layer(self, l: int, slot: int, rows: int, trace=None) -> None:
        src, dst = l % 2, (l + 1) % 2
        self.k_infer((self.grid,), (self.THREADS,), self.Y[src], self.Y[dst], self.wbuf[slot], self.state,
                     self.alive, np.int32(self.N), np.int32(self.cap), np.int32(self.ld), np.int32(self.jpw),
                     self.bias, self.ymax, stream=self.compute)
        self._compact(self.Y[dst], l)

    def _collect(self, b0: int, b1: int) -> None:
        self.k_collect((-(-(b1 - b0) // 256),), (256,), self.state, self.ids, self.out_flags, np.int64(b0),
                       stream=self.compute)

    def _digest(self, b0: int, b1: int) -> None:
        self._digest_of(self.Y[self.L % 2], 0, self.state, 1, self.ld, self.ids, b0, self.compute)

    def _final(self, b0: int, b1: int):
        import cupy
        from pipeline.gpu.transfer import cupy_stream
        self.compute.synchronize()
        B = int(self.state.get()[0])
        with cupy_stream(self.compute):
            out = cupy.zeros((b1 - b0, self.N), np.float32)
            out[self.ids[:B]] = self.Y[self.L % 2][:, :B].T
        return out

    def profile(self) -> Result:
        """One instrumented pass (no graph): per-layer copy and kernel (+ compaction) times; the
        nonzero rows per layer come from the compaction's counts."""
        self.hist.fill(0)
        cats, c_ms, k_ms = self._profiled()
        counts = self.hist.get()[: self.L].astype(np.int64)
        return Result(cats, counts, c_ms, k_ms,
                      info={"batch": self.batch, "nb": self.nb, "pack_s": self.pack_s, "graph": self.use_graph,
                            "grid": self.grid})


class ClusterRunner(PullRunner):
    """Variant cluster (cuda/sparse_dnn/cluster.cu): pull's transposed, compacted batch and its
    staging / compaction kernels, but a layer is read as clusters of output neurons that share
    their in-neighbour list: a warp loads each shared input row of a 128-image tile once and applies
    it to the cluster's (up to 16) outputs, where pull loads it once per output. Same float32 FMA
    chains as pull: bit-identical activations."""

    name = "cluster"
    THREADS = 256

    def _load_layers(self, net, cfg_model, info, notice):
        from pipeline.gpu import kernels
        self.k_cluster = kernels.load(MODEL_DIR, "cluster.cu").kernel("cluster_infer", "PPPPPiiiff")
        per_sm = max(1, 65536 // (max(self.k_cluster.registers, 1) * self.THREADS))
        self.cgrid = info.sm_count * min(per_sm, 8)
        counts = []

        def pack():
            w, c = pack_clusters(net.layers)
            counts.append(c)
            return w, 0
        host_w, _, pack_s = _packed("cluster", net.layers, notice, pack)
        self.counts = counts[0]
        self.density = float(net.edges()) / float(max(1, (self.counts[:, 1] * CL_G).sum()))
        return host_w, int(self.counts[:, 1].max()), pack_s

    def _layer(self, l: int, slot: int, rows: int, trace=None) -> None:
        src, dst = l % 2, (l + 1) % 2
        ncl, utot = (int(v) for v in self.counts[l])
        self.k_cluster((self.cgrid,), (self.THREADS,), self.Y[src], self.Y[dst], self.wbuf[slot], self.state,
                       self.alive, np.int32(ncl), np.int32(utot), np.int32(self.ld), self.bias, self.ymax,
                       stream=self.compute)
        self._compact(self.Y[dst], l)

    def profile(self) -> Result:
        res = super().profile()
        res.info.update(grid=self.cgrid, block_density=round(self.density, 4))
        return res


class BfRunner(_Digest):
    """BF: one block per nonzero row (host-compacted list), whole row per block; after every layer
    the host reads the row flags and compacts the list (a synchronisation per layer). Weights stream
    through nb buffers like snig's (the copy of layer l+1.. overlaps the kernel of layer l)."""

    def __init__(self, net, cfg_model, info, notice=print):
        import cupy
        import pycuda.driver as drv
        from pipeline.gpu import kernels
        self.net, self.N, self.L, self.n = net, net.N, net.L, net.images
        self.batch = min(int(cfg_model.batch_size) or self.n, self.n)
        self.nb = max(1, min(int(cfg_model.weight_buffers), self.L))
        mod = kernels.load(MODEL_DIR, "snig.cu")
        self.k_infer = mod.kernel("bf_infer", "PPPPPiiff")
        self.k_stage = mod.kernel("stage_rows", "PPPqiiiPP")
        self.host_w, self.cap, self.pack_s = _packed("bf (CSC)", net.layers, notice, lambda: pack_csc(net.layers))
        self.wbuf = [cupy.empty(self.host_w.shape[1], np.int32) for _ in range(self.nb)]
        B, N = self.batch, self.N
        self.Y = [cupy.empty((B, N), np.float32), cupy.empty((B, N), np.float32)]
        self.Y[1].fill(np.nan)
        self.dummy_flags = cupy.zeros((B, 1), np.uint8)
        self.rows_dev = cupy.empty(B, np.int32)
        self.row_nz = cupy.empty(B, np.uint8)
        self.inp = _device_inputs(net.Y0)
        self.compute, self.copy = drv.Stream(), drv.Stream()
        self.copied = [drv.Event() for _ in range(self.nb)]
        self.consumed = [drv.Event() for _ in range(self.nb)]
        self.bias, self.ymax = np.float32(net.bias), np.float32(net.ymax)
        self.nnz_rows = np.zeros(self.L, np.int64)
        self.c_ms = self.k_ms = 0.0
        self._digest_setup()

    def _copy(self, l: int) -> None:
        import pycuda.driver as drv
        slot = l % self.nb
        self.copy.wait_for_event(self.consumed[slot])
        drv.memcpy_htod_async(int(self.wbuf[slot].data.ptr), self.host_w[l], self.copy)
        self.copied[slot].record(self.copy)

    def run(self, lo: int = 0, hi: Optional[int] = None, profile: bool = False) -> np.ndarray:
        """Images [lo, hi) (default all); their 0-based categories."""
        import pycuda.driver as drv
        from pipeline.gpu.transfer import cupy_stream
        cats = []
        self.nnz_rows[:] = 0
        self._pass_begin(self.compute)
        for b0, b1 in _batches(self.n if hi is None else hi, self.batch, lo):
            rows = b1 - b0
            with cupy_stream(self.compute):
                self.Y[0][:rows].fill(0)
            ip, ix, dv = self.inp
            self.k_stage((rows,), (128,), ip, ix, dv, np.int64(b0), np.int32(self.N), np.int32(1),
                         np.int32(self.N), self.Y[0], self.dummy_flags, stream=self.compute)
            active = np.flatnonzero(np.diff(self.net.Y0.indptr[b0:b1 + 1]) > 0).astype(np.int32)
            for s in range(self.nb):
                self.consumed[s].record(self.compute)
            for l in range(min(self.nb, self.L)):
                self._copy(l)
            for l in range(self.L):
                slot = l % self.nb
                src, dst = l % 2, (l + 1) % 2
                if active.size:
                    drv.memcpy_htod_async(int(self.rows_dev.data.ptr), active, self.compute)
                    self.compute.wait_for_event(self.copied[slot])
                    if profile:
                        e0, e1 = drv.Event(), drv.Event()
                        e0.record(self.compute)
                    self.k_infer((active.size,), (1024,), self.Y[src], self.Y[dst], self.rows_dev, self.row_nz,
                                 self.wbuf[slot], np.int32(self.N), np.int32(self.cap), self.bias, self.ymax,
                                 stream=self.compute)
                    if profile:
                        e1.record(self.compute)
                self.consumed[slot].record(self.compute)
                if l + self.nb < self.L:
                    self._copy(l + self.nb)
                if active.size:
                    flags = np.empty(active.size, np.uint8)
                    drv.memcpy_dtoh_async(flags, int(self.row_nz.data.ptr), self.compute)
                    self.compute.synchronize()                 # host-side compaction every layer
                    if profile:
                        self.k_ms += e1.time_since(e0)
                    active = active[flags.astype(bool)]
                self.nnz_rows[l] += active.size
            cats.append(active.astype(np.int64) + b0)
            if self.track or self.keep_final:
                self._finish(b0, b1, active)
        self.copy.synchronize()
        self.compute.synchronize()
        self._pass_end()
        return np.sort(np.concatenate(cats)) if cats else np.zeros(0, np.int64)

    def _finish(self, b0: int, b1: int, active: np.ndarray) -> None:
        """Rows that died before the last layer keep stale values in bf's buffers: zero them, then
        digest / keep the batch's final activations."""
        import cupy
        from pipeline.gpu.transfer import cupy_stream
        Y = self.Y[self.L % 2][: b1 - b0]
        with cupy_stream(self.compute):
            dead = cupy.ones(b1 - b0, bool)
            dead[cupy.asarray(active)] = False
            Y[dead] = 0
        if self.track:
            self._digest_of(Y, b1 - b0, None, self.N, 1, None, b0, self.compute)
        if self.keep_final:
            with cupy_stream(self.compute):
                self.finals.append((b0, Y.copy()))

    def profile(self) -> Result:
        import pycuda.driver as drv
        self.k_ms = 0.0
        cats = self.run(profile=True)
        # the weight stream alone: every layer once per batch
        e0, e1 = drv.Event(), drv.Event()
        e0.record(self.copy)
        for _ in _batches(self.n, self.batch):
            for l in range(self.L):
                drv.memcpy_htod_async(int(self.wbuf[l % self.nb].data.ptr), self.host_w[l], self.copy)
        e1.record(self.copy)
        e1.synchronize()
        return Result(cats, self.nnz_rows.copy(), e1.time_since(e0), self.k_ms,
                      info={"batch": self.batch, "nb": self.nb})


class CusparseRunner(_Digest):
    """cuSPARSE SpMM through cupyx: Z^T = W^T Y^T per layer on the active rows only (Y^T dense,
    N x active), bias on nonzeros, clip, then the all-zero columns (rows of Y) are dropped."""

    def __init__(self, net, cfg_model, info, notice=print):
        import cupy
        self.net, self.N, self.L, self.n = net, net.N, net.L, net.images
        # dense Y^T plus the product and temporaries: cap the batch at ~1/6 of device memory
        fit = max(1, int(info.total_mem // (6 * 4 * self.N)))
        self.batch = min(int(cfg_model.batch_size) or self.n, self.n, fit)
        self.host_w, self.cap, self.pack_s = _packed("cusparse (CSC)", net.layers, notice,
                                                     lambda: pack_csc(net.layers))
        self.nnz = [int(self.host_w[l, self.N]) for l in range(self.L)]   # colptr[N] of each packed layer
        self.wbuf = cupy.empty(self.host_w.shape[1], np.int32)
        self.bias, self.ymax = np.float32(net.bias), np.float32(net.ymax)
        self.nnz_rows = np.zeros(self.L, np.int64)
        self._digest_setup()

    def run(self, lo: int = 0, hi: Optional[int] = None) -> np.ndarray:
        """Images [lo, hi) (default all); their 0-based categories."""
        import cupy
        import cupyx.scipy.sparse as csp
        cats = []
        self.nnz_rows[:] = 0
        self._pass_begin()
        N, cap = self.N, self.cap
        for b0, b1 in _batches(self.n if hi is None else hi, self.batch, lo):
            Y = csp.csr_matrix(self.net.Y0[b0:b1])
            active = cupy.arange(b1 - b0)
            Yt = cupy.ascontiguousarray(Y.T.toarray())              # N x rows
            keep = Yt.any(axis=0)
            Yt, active = Yt[:, keep], active[keep]
            for l in range(self.L):
                self.wbuf.set(self.host_w[l])
                if active.size:
                    nnz = self.nnz[l]
                    Wt = csp.csr_matrix((self.wbuf[N + 1 + cap: N + 1 + cap + nnz].view(np.float32),
                                         self.wbuf[N + 1: N + 1 + nnz], self.wbuf[: N + 1]), shape=(N, N))
                    Z = Wt @ Yt                                     # cuSPARSE SpMM
                    Z = cupy.where(Z != 0, cupy.clip(Z + self.bias, 0, self.ymax), 0).astype(np.float32)
                    keep = Z.any(axis=0)
                    Yt, active = Z[:, keep], active[keep]
                self.nnz_rows[l] += int(active.size)
            cats.append(cupy.asnumpy(active).astype(np.int64) + b0)
            ids = active.astype(np.int32)
            if self.track and active.size:
                Yt = cupy.ascontiguousarray(Yt)
                self._digest_of(Yt, int(active.size), None, 1, Yt.shape[1], ids, b0)
            if self.keep_final:
                out = cupy.zeros((b1 - b0, N), np.float32)
                out[ids] = Yt.T
                self.finals.append((b0, out))
        cupy.cuda.get_current_stream().synchronize()
        self._pass_end()
        return np.sort(np.concatenate(cats)) if cats else np.zeros(0, np.int64)

    def profile(self) -> Result:
        cats = self.run()
        return Result(cats, self.nnz_rows.copy(), info={"batch": self.batch})


RUNNERS = {"snig": SnigRunner, "pull": PullRunner, "cluster": ClusterRunner, "bf": BfRunner,
           "cusparse": CusparseRunner}
