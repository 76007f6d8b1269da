"""SLIDE on the GPU: :class:`SlideGPU` (ours), :class:`DenseGPU` (dense_fp32 / dense_tf32 full
softmax through cuBLAS) and :class:`TorchDense` (PyTorch full softmax, TF32). Each is an engine
with the interface of ``reference.ReferenceEngine``: ``batch``, ``set_hash``, ``rebuild``, ``step``,
``phase_times``, ``epoch_stats``, ``predict_topk``, ``params``, ``mem_used_bytes``; all host draws
(weights, hash functions, node order, pad offsets) come from the caller.

Kernels: ``cuda/slide/hash.cu`` (WTA/DWTA codes; table build keys), ``lsh.cu`` (scan, table build,
query), ``train.cu`` (input layer, fused output layer, row lists, Adam, dense baseline kernels).

Design (one training step, no host synchronisation):

1. ``input_fwd``: h = relu(x W1 + b1), a block per sample.
2. ``lsh_query``: the samples' buckets (``wta_hash``), then ``slide_query``, a block per sample:
   gather its L buckets, bitonic sort in shared memory, runs -> (id, count), threshold, labels,
   padding from the node order, deterministic truncation; the set sorted by id at ``act[b*stride]``
   (a CSC with fixed-capacity segments: offsets b*stride, ``act_cnt[b]`` entries).
3. ``output_fwd_softmax``: ``slide_output``, a block per sample, 8 lanes per active W2 row (128-byte
   loads): z, online softmax, and in the same pass the softmax-weighted sum of the rows, so that dh
   needs no second read of W2 (a warp's groups merge by shuffles, the 8 warps through 17 KB of shared
   memory at hidden 256); then dz = (p - y)/B per entry and each entry's slot in its row's list.
4. ``output_bwd``: scan of the per-row counts and scatter: the entries grouped by output row.
5. ``hidden_bwd``: the same grouping of the batch's input non-zeros by feature.
6. ``update``: ``adam_rows`` computes each row's gradient from its list (sum of dz * h_b, or
   x * dh_b) and applies Adam in the same pass: a touched row is read and written once and there is
   no gradient buffer and no atomics on weights (the paper accumulates with atomics into dense
   gradients). lazy_adam skips rows without entries; adam updates every row.

Table build (``rebuild``): keys ((table, bucket) << rbits | insertion rank) for every (neuron,
table), one radix sort (CuPy), segment bounds, the last ``bucket_capacity`` of each segment kept
(FIFO) and scattered to a flat CSR: race-free and deterministic.

Work counters (``work``, per epoch, ``reference.WORK``): the bucket ids the query gathered, the W1
and W2 rows updated; the active entries, the non-zeros and the W2 rows hashed by the builds are
counted on the host.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from pipeline.errors import ConfigError
from pipeline.gpu import kernels
from pipeline.models.slide import reference as ref

PHASES = ref.PHASES
QUERY_THREADS = 512         # a block a sample (scratch in shared memory; measured faster than 1024 at Amazon's shape)
QUERY_THREADS_GLOBAL = 1024  # scratch in global memory (Wiki's shape: sorts of up to 64 K ids a block)
SCAN_TILE = 2048
EVAL_BYTES = 1 << 31            # logits of one evaluation chunk (rows x N floats)


def _cp():
    import cupy
    return cupy


def _i32(x) -> np.int32:
    return np.int32(int(x))


# ============================================================================ device data


class DeviceSplit:
    """A split's X and Y CSR on the device (int32 indptr / indices, float32 values), uploaded once;
    the host indptr of X is kept for batch sizes."""

    def __init__(self, split):
        cp = _cp()
        self.host = split
        X, Y = split.X.tocsr(), split.Y.tocsr()
        if X.nnz >= 2 ** 31 or Y.nnz >= 2 ** 31:
            raise ConfigError("dataset: a split with 2^31 or more non-zeros is not supported by the GPU trainer; "
                              "use a smaller file")
        self.n = X.shape[0]
        self.x_indptr = X.indptr.astype(np.int64)
        self.xptr = cp.asarray(X.indptr.astype(np.int32))
        self.xidx = cp.asarray(X.indices.astype(np.int32))
        self.xval = cp.asarray(X.data.astype(np.float32))
        self.yptr = cp.asarray(Y.indptr.astype(np.int32))
        self.yidx = cp.asarray(Y.indices.astype(np.int32))
        lens = np.diff(Y.indptr)
        self.max_labels = int(lens.max(initial=0))
        xl = np.diff(X.indptr)
        self.max_nnz = int(xl.max(initial=0))


@dataclass
class DeviceBatch:
    split: DeviceSplit
    r0: int
    r1: int

    def __len__(self) -> int:
        return self.r1 - self.r0

    @property
    def nnz(self) -> int:
        return int(self.split.x_indptr[self.r1] - self.split.x_indptr[self.r0])


@dataclass
class ActiveDev:
    """Active sets on the device: ids (B, stride) int32 (row b's first cnt[b] sorted), cnt (B,)."""
    ids: object
    cnt: object
    overflow: object

    def host(self) -> ref.Active:
        ids, cnt = self.ids.get(), self.cnt.get()
        B = cnt.size
        off = np.zeros(B + 1, np.int64)
        np.cumsum(cnt, out=off[1:])
        flat = np.concatenate([ids[b, :cnt[b]] for b in range(B)]) if B else np.zeros(0, np.int32)
        ov = self.overflow.get()
        return ref.Active(off, flat.astype(np.int32), int(ov[0]), int(ov[1]))


class _Phases:
    """CUDA events at phase boundaries, accumulated; one synchronisation per read."""

    def __init__(self, elapsed_ms=lambda a, b: b.time_since(a)):
        self.pairs: List[Tuple[str, object, object]] = []
        self.last = None
        self.elapsed_ms = elapsed_ms        # (start, end) -> ms; PyCUDA's events by default

    def mark(self):
        import pycuda.driver as drv
        from pipeline.gpu.graphs import current_stream
        e = drv.Event()
        e.record(current_stream())
        self.last = e
        return e

    def start(self):
        return self.mark()

    def lap(self, phase: str, start):
        e = self.mark()
        self.pairs.append((phase, start, e))
        return e

    def take(self) -> Dict[str, float]:
        out = {p: 0.0 for p in PHASES}
        if self.pairs:
            self.pairs[-1][2].synchronize()
            for p, a, b in self.pairs:
                out[p] += self.elapsed_ms(a, b)
        self.pairs = []
        return out


class _PinnedRing:
    """Per-step host values (pad offsets) through a ring of pinned slots, copied asynchronously; a
    slot is rewritten only after its previous copy completed."""

    def __init__(self, width: int, slots: int = 64):
        import pycuda.driver as drv
        self.buf = drv.pagelocked_empty((slots, width), np.int64)
        self.events = [None] * slots
        self.i = 0
        self.width = width

    def copy(self, values: np.ndarray, dst) -> None:
        import pycuda.driver as drv
        from pipeline.gpu.graphs import current_stream
        s = self.i % len(self.events)
        self.i += 1
        if self.events[s] is not None:
            self.events[s].synchronize()
        n = values.size
        self.buf[s, :n] = values
        stream = current_stream()
        drv.memcpy_htod_async(int(dst.data.ptr), self.buf[s, :n], stream)
        e = drv.Event()
        e.record(stream)
        self.events[s] = e


def _fast(kernel):
    """``kernel`` launched with CuPy arrays passed as raw device pointers (their ``.data.ptr``):
    the CUDA array interface dict each array would otherwise build costs host time on every
    launch, and a step launches about 25 kernels."""
    nd = _cp().ndarray

    def launch(grid, block, *args, shared: int = 0):
        kernel(grid, block, *[a.data.ptr if type(a) is nd else a for a in args], shared=shared)
    launch.kernel = kernel
    return launch


def _memset0(a) -> None:
    import pycuda.driver as drv
    from pipeline.gpu.graphs import current_stream
    if a.nbytes:
        drv.memset_d8_async(int(a.data.ptr), 0, int(a.nbytes), current_stream())


class _Scanner:
    """Exclusive scan of int32 arrays (``lsh.cu``: tiles, totals, apply); out has n + 1 entries."""

    def __init__(self, mod):
        self.k_tiles = _fast(mod.kernel("scan_tiles", "PqP"))
        self.k_totals = _fast(mod.kernel("scan_totals", "Pi"))
        self.k_apply = _fast(mod.kernel("scan_apply", "PqPiP"))
        self.tsum = None

    def __call__(self, inp, n: int, out) -> None:
        cp = _cp()
        tiles = max(1, -(-int(n) // SCAN_TILE))
        if self.tsum is None or self.tsum.size < tiles + 1:
            self.tsum = cp.empty(tiles + 1, cp.int32)
        self.k_tiles((tiles,), (256,), inp, np.int64(n), self.tsum)
        self.k_totals((1,), (1024,), self.tsum, _i32(tiles))
        self.k_apply((tiles,), (256,), inp, np.int64(n), self.tsum, _i32(tiles), out)


# ============================================================================ shared engine parts


class _Engine:
    name = "gpu"

    def __init__(self, ctx, hp: ref.Hyper, params: ref.Params, n_features: int, n_labels: int):
        cp = _cp()
        from pipeline.gpu import device
        if device._info is None:
            device.init(0)
        H = int(hp.hidden)
        if H % 32:
            raise ConfigError(f"model.hidden={H}: the GPU kernels need a multiple of 32 (e.g. 128)")
        self.hp, self.F, self.N, self.H, self.ctx = hp, int(n_features), int(n_labels), H, ctx
        self.train_mod = kernels.load("slide", "train.cu", defines={"SLIDE_HID": H})
        self.lsh_mod = kernels.load("slide", "lsh.cu")
        def k(name, sig):
            return _fast(self.train_mod.kernel(name, sig))
        self.k_input = k("input_fwd", "PPPiPPP")
        self.k_xcount = k("x_count", "PPiPPP")
        self.k_xscatter = k("x_scatter", "PPiiPPP")
        self.k_adam_rows = k("adam_rows", "PPPPPPiPPPPPiPPffffP")
        self.k_touched = k("touched_rows", "PiPP")
        self.k_adam_b1 = k("adam_hidden_bias", "PPPPiffff")
        self.scan = _Scanner(self.lsh_mod)
        self.upload(params)
        self.lazy = hp.optimizer == "lazy_adam"
        self.phases = _Phases()
        self.loss = cp.zeros(1, cp.float64)
        self.stats_acc = cp.zeros(2, cp.uint64)           # active sum, active max
        self.overflow = cp.zeros(2, cp.uint64)
        self.dropped = cp.zeros(1, cp.uint64)
        self.steps = self.samples = self.rebuilds = 0
        self.cntF = cp.zeros(self.F, cp.int32)
        self.startF = cp.zeros(self.F + 1, cp.int32)
        self.rowsF = cp.empty(self.F, cp.int32)
        self.nrows = cp.zeros(2, cp.int32)                # touched rows of W1, of W2
        self.work = cp.zeros(3, cp.uint64)                # gathered ids, W1 rows updated, W2 rows updated
        self.nnz_sum = self.hashed = 0
        from pipeline.gpu import device as _dev
        self.sms = int(_dev.info().sm_count)
        self._nnz_cap = 0
        self._ensure_nnz(1)          # xpos / xeb / listF exist before the first batch, even one without features
        self._splits: Dict[int, DeviceSplit] = {}

    # -------------------------------------------------------------- parameters
    def upload(self, p: ref.Params) -> None:
        cp = _cp()
        f32 = lambda a: cp.asarray(np.ascontiguousarray(a, np.float32))  # noqa: E731
        for name in ("W1", "b1", "W2", "b2", "mW1", "vW1", "mb1", "vb1", "mW2", "vW2", "mb2", "vb2"):
            setattr(self, name, f32(getattr(p, name)))
        self.t = int(p.t)

    def params(self) -> ref.Params:
        names = ("W1", "b1", "W2", "b2", "mW1", "vW1", "mb1", "vb1", "mW2", "vW2", "mb2", "vb2")
        return ref.Params(**{n: getattr(self, n).get() for n in names}, t=self.t)

    def lr_t(self) -> float:
        hp, t = self.hp, self.t
        return hp.lr * math.sqrt(1.0 - hp.beta2 ** t) / (1.0 - hp.beta1 ** t)

    # -------------------------------------------------------------- data
    def device_split(self, split) -> DeviceSplit:
        if isinstance(split, DeviceSplit):
            return split
        key = id(split)
        ds = self._splits.get(key)
        if ds is None or ds.n != split.X.shape[0]:
            ds = DeviceSplit(split)
            self._splits[key] = ds
            self._split_refs = getattr(self, "_split_refs", []) + [split]     # keep id() valid
        return ds

    def batch(self, split, r0: int, r1: int, order: Optional[np.ndarray] = None) -> DeviceBatch:
        """Rows [r0, r1) of a split (uploaded once); with ``order`` the rows order[r0:r1], gathered
        on the host and uploaded as their own small split (the shuffle path)."""
        if order is None:
            return DeviceBatch(self.device_split(split), int(r0), int(r1))
        host = split.host if isinstance(split, DeviceSplit) else split
        rows = np.asarray(order[r0:r1])
        sub = ref.HostBatch(host.X[rows], host.Y[rows])
        return DeviceBatch(DeviceSplit(sub), 0, len(rows))

    def _ensure_nnz(self, nnz: int) -> None:
        """The per-non-zero buffers of a batch's input (xpos, xeb, listF) hold at least max(nnz, 1)."""
        cp = _cp()
        if max(int(nnz), 1) > self._nnz_cap:
            cap = max(int(nnz), 1, 2 * self._nnz_cap)
            self.xpos = cp.empty(cap, cp.int32)
            self.xeb = cp.empty(cap, cp.int32)
            self.listF = cp.empty(cap, cp.int32)
            self._nnz_cap = cap

    def _input(self, batch: DeviceBatch, h) -> None:
        s = batch.split
        self.k_input((len(batch),), (128,), s.xptr, s.xidx, s.xval, _i32(batch.r0), self.W1, self.b1, h)

    def _feature_lists(self, batch: DeviceBatch) -> int:
        """Group the batch's input non-zeros by feature (count, scan, scatter); returns nnz."""
        s, B = batch.split, len(batch)
        nnz = batch.nnz
        self._ensure_nnz(nnz)
        _memset0(self.cntF)
        self.k_xcount((B,), (128,), s.xptr, s.xidx, _i32(batch.r0), self.cntF, self.xpos, self.xeb)
        self.scan(self.cntF, self.F, self.startF)
        if nnz:
            self.k_xscatter((-(-nnz // 256),), (256,), s.xptr, s.xidx, _i32(batch.r0), _i32(B), self.xpos,
                            self.startF, self.listF)
        return nnz

    def _adam_rows(self, W, M, V, bias, Mb, Vb, R: int, start, lst, ew, ediv: int, eb, H, lazy: bool,
                   counter: int) -> None:
        """Adam over W's rows with the gradient from the row lists; lazy: only rows with entries
        (listed on the device first, then a resident grid walks the list)."""
        hp, f = self.hp, np.float32
        nr = int(self.nrows.data.ptr) + 4 * counter
        acc = int(self.work.data.ptr) + 8 * (1 + counter)
        if lazy:
            rows = self.rowsN if counter else self.rowsF
            self.k_touched((-(-R // 256),), (256,), start, _i32(R), rows, nr)
            grid = 2 * self.sms                            # resident: 2 blocks an SM (the kernel's launch bounds)
        else:
            rows, nr = 0, 0
            grid = min(-(-R // 32), 8 * self.sms)
        self.k_adam_rows((grid,), (256,), W, M, V, bias, Mb, Vb, _i32(R), rows, nr, start, lst, ew, _i32(ediv), eb, H,
                         f(self.lr_t()), f(hp.beta1), f(hp.beta2), f(hp.eps), acc)

    def _update_w1_b1(self, batch: DeviceBatch, dh, lazy: bool) -> None:
        hp, s = self.hp, batch.split
        base = int(s.x_indptr[batch.r0])
        xval_ptr = int(s.xval.data.ptr) + 4 * base
        f = np.float32
        self._adam_rows(self.W1, self.mW1, self.vW1, 0, 0, 0, self.F, self.startF, self.listF, xval_ptr, 0, self.xeb,
                        dh, lazy, 0)
        self.k_adam_b1((1,), (128,), self.b1, self.mb1, self.vb1, dh, _i32(len(batch)), f(self.lr_t()),
                       f(hp.beta1), f(hp.beta2), f(hp.eps))

    # -------------------------------------------------------------- reports
    def phase_times(self) -> Dict[str, float]:
        return self.phases.take()

    def epoch_stats(self) -> Dict[str, float]:
        cp = _cp()
        loss = float(self.loss.get()[0])
        st, ov, dr = self.stats_acc.get(), self.overflow.get(), self.dropped.get()
        out = {"loss": loss / max(self.steps, 1), "active_mean": float(st[0]) / max(self.samples, 1),
               "active_max": float(st[1]), "overflow_samples": int(ov[0]), "overflow_dropped": int(ov[1]),
               "table_dropped": int(dr[0]), "rebuilds": self.rebuilds}
        for a in (self.loss, self.stats_acc, self.overflow, self.dropped):
            a.fill(0)
        self.steps = self.samples = self.rebuilds = 0
        cp.cuda.Device().synchronize()
        return out

    def mem_used_bytes(self) -> int:
        cp = _cp()
        return int(cp.get_default_memory_pool().used_bytes())

    # -------------------------------------------------------------- evaluation
    def predict_topk(self, X, k: int, eval_batch: int = 4096) -> np.ndarray:
        """Top-k ids over the full output layer: h of a chunk of rows, logits = h W2^T + b2 (cuBLAS
        fp32), then the fused softmax + top-N kernel of the argueta model (ties: lower id first)."""
        cp = _cp()
        from pipeline.gpu.blas import sgemm
        from pipeline.models.argueta.gpu import TopnPlan
        import scipy.sparse as sp
        X = sp.csr_matrix(X)
        n = X.shape[0]
        k = min(int(k), self.N)
        rows = max(1, min(int(eval_batch), EVAL_BYTES // (4 * self.N)))
        out = np.zeros((n, k), np.int64)
        plans: Dict[int, object] = {}
        Z = cp.empty((min(rows, max(n, 1)), self.N), cp.float32)
        h = cp.empty((min(rows, max(n, 1)), self.H), cp.float32)
        kb = self.train_mod.kernel("add_bias_rows", "PPii")
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            m = r1 - r0
            sub = X[r0:r1]
            ds = DeviceSplit(ref.HostBatch(sub, sp.csr_matrix((m, 1), dtype=np.float32)))
            hv, Zv = h[:m], Z[:m]
            self._input(DeviceBatch(ds, 0, m), hv)
            sgemm(hv, self.W2, Zv, trans_b=True, precision="fp32")
            kb((-(-(m * self.N) // 256),), (256,), Zv, self.b2, _i32(m), _i32(self.N))
            plan = plans.get(m)
            if plan is None:
                try:
                    plan = TopnPlan(m, self.N, k)
                except ValueError:       # a row too long for shared memory: the atomic kernel streams it
                    plan = TopnPlan(m, self.N, k, method="early_exit")
                plans[m] = plan
            P, I = cp.empty((m, k), cp.float32), cp.empty((m, k), cp.int32)
            plan.run(Zv, P, I)
            out[r0:r1] = I.get()
        return out


# ============================================================================ SLIDE


class SlideGPU(_Engine):
    """The SLIDE trainer on the GPU (variant ``slide``)."""

    name = "slide"

    def __init__(self, ctx, hp: ref.Hyper, params: ref.Params, n_features: int, n_labels: int):
        super().__init__(ctx, hp, params, n_features, n_labels)
        cp = _cp()
        self.hash_mod = kernels.load("slide", "hash.cu", defines={"SLIDE_K": int(hp.K), "SLIDE_BIN": int(hp.bin_size),
                                                                  "SLIDE_DWTA": int(bool(hp.dwta))})
        self.k_hash = _fast(self.hash_mod.kernel("wta_hash", "PiiPiPP"))
        self.k_keys = _fast(self.hash_mod.kernel("wta_build_keys", "PiiPiPiiiP"))

        def lk(name, sig):
            return _fast(self.lsh_mod.kernel(name, sig))
        self.k_bounds = lk("seg_bounds", "PqiPP")
        self.k_kept = lk("seg_kept", "PPqiP")
        self.k_tscatter = lk("table_scatter", "PqiPPPPP")
        self.k_query = lk("slide_query", "PPPiiiPPiPPiiiiPPPiPP")
        self.k_actstats = lk("act_stats", "PiP")
        self.k_dropped = lk("add_dropped", "PqqP")
        def tk(name, sig):
            return _fast(self.train_mod.kernel(name, sig))
        self.k_output = tk("slide_output", "PPPPPiPPiiPPPPP")
        self.k_ascatter = tk("act_scatter", "PPiPPP")
        self.L, self.nb = int(hp.L), int(hp.nbuckets)
        self.nseg = self.L * self.nb
        self.rbits = max(1, math.ceil(math.log2(max(self.N, 2))))
        seg_bits = max(1, math.ceil(math.log2(self.nseg)))
        if seg_bits + self.rbits > 64:
            raise ConfigError(f"model.K={hp.K}, model.bin_size={hp.bin_size}, model.L={hp.L}: table keys need "
                              f"{seg_bits + self.rbits} bits (> 64); use a smaller K or bin_size")
        if self.nseg >= 2 ** 31 or self.L * self.N >= 2 ** 31:
            raise ConfigError(f"model.L={hp.L} x buckets/labels too large for int32 table offsets; lower K or L")
        self.bins = self.order = None
        self.G = cp.zeros(self.nseg + 1, cp.int32)          # no table yet: every bucket empty
        self.tids = cp.zeros(max(1, self.L * self.N), cp.int32)
        self.cntN = cp.zeros(self.N, cp.int32)
        self.startN = cp.zeros(self.N + 1, cp.int32)
        self.rowsN = cp.empty(self.N, cp.int32)
        self._B = self._C = self._last_B = 0
        self.pad_ring = None

    # -------------------------------------------------------------- hashing and tables
    def set_hash(self, bins: np.ndarray, node_order: np.ndarray) -> None:
        cp = _cp()
        bins = np.ascontiguousarray(bins, np.int32)
        if bins.shape != (self.hp.K * self.L, self.hp.bin_size):
            raise ValueError(f"bins must be ({self.hp.K * self.L}, {self.hp.bin_size}), got {bins.shape}")
        self.bins = cp.asarray(bins)
        self.order = cp.asarray(np.ascontiguousarray(node_order, np.int32))

    def hash_codes(self, V) -> Tuple[object, object]:
        """codes (n, L, K) int32 and buckets (n, L) int32 of the rows of V (device, (n, hidden))."""
        cp = _cp()
        V = cp.ascontiguousarray(V, cp.float32)
        n = V.shape[0]
        codes = cp.empty((n, self.L, self.hp.K), cp.int32)
        bk = cp.empty((n, self.L), cp.int32)
        if n:
            self.k_hash((-(-(n * self.L) // 256),), (256,), V, _i32(V.shape[1]), _i32(n), self.bins, _i32(self.L),
                        codes, bk)
        return codes, bk

    def rebuild(self) -> None:
        cp = _cp()
        if self.bins is None:
            raise RuntimeError("set_hash() before rebuild()")
        t0 = self.phases.start()
        N, L, M = self.N, self.L, self.L * self.N
        keys = cp.empty(M, cp.uint64)
        self.k_keys((-(-N // 32),), (32, 8), self.W2, _i32(self.H), _i32(self.H), self.order, _i32(N), self.bins,
                    _i32(L), _i32(self.nb), _i32(self.rbits), keys, shared=4 * 32 * (self.H + 1))
        self.hashed += N
        keys.sort()
        sstart = cp.zeros(self.nseg, cp.int32)
        send = cp.zeros(self.nseg, cp.int32)
        kept = cp.empty(self.nseg, cp.int32)
        self.k_bounds((-(-M // 256),), (256,), keys, np.int64(M), _i32(self.rbits), sstart, send)
        self.k_kept((-(-self.nseg // 256),), (256,), sstart, send, np.int64(self.nseg), _i32(self.hp.bucket_capacity),
                    kept)
        self.scan(kept, self.nseg, self.G)
        self.k_tscatter((-(-M // 256),), (256,), keys, np.int64(M), _i32(self.rbits), send, kept, self.G,
                        self.order, self.tids)
        self.k_dropped((1,), (32,), self.G, np.int64(self.nseg), np.int64(M), self.dropped)
        del keys, sstart, send, kept
        self.rebuilds += 1
        self.phases.lap("rebuild", t0)

    def tables(self) -> ref.Tables:
        """Host copy in the reference's layout (per-table offsets, ids padded with -1)."""
        G = self.G.get().astype(np.int64)
        tids = self.tids.get()
        L, nb, N = self.L, self.nb, self.N
        offsets = np.empty((L, nb + 1), np.int64)
        ids = np.full((L, N), -1, np.int32)
        for t in range(L):
            g = G[t * nb:(t + 1) * nb + 1]
            offsets[t] = g - g[0]
            ids[t, :g[-1] - g[0]] = tids[g[0]:g[-1]]
        dropped = L * N - int(G[-1])
        return ref.Tables(offsets, ids, dropped)

    # -------------------------------------------------------------- query
    def _capacity(self, max_labels: int) -> Tuple[int, int]:
        hp = self.hp
        need = max(self.L * hp.bucket_capacity + int(max_labels), min(hp.min_active, self.N), 1)
        C = 1 << (need - 1).bit_length()
        stride = min(int(hp.max_active), C) if hp.max_active > 0 else C
        return C, max(1, stride)

    def _buffers(self, B: int, max_labels: int) -> None:
        cp = _cp()
        C, stride = self._capacity(max_labels)
        if B <= self._B and C <= self._C:
            return
        B = max(B, self._B)
        C = max(C, self._C)
        stride = max(stride, getattr(self, "stride", 0))
        self._B, self._C, self.stride = B, C, stride
        self.h = cp.empty((B, self.H), cp.float32)
        self.dh = cp.empty((B, self.H), cp.float32)
        self.sbkt = cp.empty((B, self.L), cp.int32)
        self.act = cp.empty((B, stride), cp.int32)
        self.act_cnt = cp.zeros(B, cp.int32)
        self.vals = cp.empty((B, stride), cp.float32)
        self.pos = cp.empty((B, stride), cp.int32)
        self.listN = cp.empty(B * stride, cp.int32)
        self.pad_dev = cp.zeros(B, cp.int64)
        self.pad_ring = _PinnedRing(B)
        info = __import__("pipeline.gpu.device", fromlist=["info"]).info()
        self.q_smem = 12 * C + 4 * (self.L + 1)
        if self.q_smem > int(info.smem_per_block_optin) - 1024:
            self.q_smem = 4 * (self.L + 1)
            self.gscratch = cp.empty(B * 12 * C, cp.uint8)
        else:
            self.gscratch = None

    def query(self, h, labels=None, pad_off=None) -> ActiveDev:
        """Active sets of the rows of h (device (B, hidden)); ``labels``: a DeviceBatch whose labels
        join (training) or None. Returns device arrays (``.host()`` for a reference.Active)."""
        cp = _cp()
        h = cp.ascontiguousarray(h, cp.float32)
        B = h.shape[0]
        ml = labels.split.max_labels if labels is not None else 0
        self._buffers(B, ml)
        if h.data.ptr != self.h.data.ptr:
            self.h[:B] = h
        pad = np.zeros(B, np.int64) if pad_off is None else np.asarray(pad_off, np.int64)
        self.pad_ring.copy(pad, self.pad_dev)
        self._query(B, labels)
        return ActiveDev(self.act[:B], self.act_cnt[:B], self.overflow)

    def _query(self, B: int, batch: Optional[DeviceBatch]) -> None:
        hp = self.hp
        self.k_hash((-(-(B * self.L) // 256),), (256,), self.h, _i32(self.H), _i32(B), self.bins, _i32(self.L), 0,
                    self.sbkt)
        yptr = batch.split.yptr if batch is not None else 0
        yidx = batch.split.yidx if batch is not None else 0
        r0 = batch.r0 if batch is not None else 0
        threads = QUERY_THREADS if self.gscratch is None else QUERY_THREADS_GLOBAL
        self.k_query((B,), (threads,), self.sbkt, self.G, self.tids, _i32(self.L), _i32(self.nb), _i32(self.N),
                     yptr, yidx, _i32(r0), self.order, self.pad_dev, _i32(hp.threshold), _i32(hp.min_active),
                     _i32(self.stride), _i32(self._C), self.gscratch if self.gscratch is not None else 0,
                     self.act, self.act_cnt, _i32(self.stride), self.overflow, self.work, shared=self.q_smem)

    def active_for(self, split, r0: int, r1: int, pad_off: np.ndarray) -> ref.Active:
        """The active sets a step on rows [r0, r1) would use now (host copy; nothing is updated)."""
        batch = self.batch(split, r0, r1)
        B = len(batch)
        self._buffers(B, batch.split.max_labels)
        self._input(batch, self.h)
        self.pad_ring.copy(np.asarray(pad_off, np.int64), self.pad_dev)
        saved, work = self.overflow.copy(), self.work.copy()
        self._query(B, batch)
        act = ActiveDev(self.act[:B], self.act_cnt[:B], self.overflow).host()
        act.overflow_samples -= int(saved[0].get())
        act.overflow_dropped -= int(saved[1].get())
        act.gathered = int(self.work[0].get()) - int(work[0].get())
        self.overflow[...] = saved
        self.work[...] = work
        return act

    # -------------------------------------------------------------- one step
    def step(self, batch: DeviceBatch, pad_off: np.ndarray) -> None:
        B = len(batch)
        self._buffers(B, batch.split.max_labels)
        s = batch.split
        ph = self.phases
        t0 = ph.start()
        self._input(batch, self.h)
        t1 = ph.lap("input_fwd", t0)
        self.pad_ring.copy(np.asarray(pad_off, np.int64), self.pad_dev)
        self._query(B, batch)
        self.k_actstats((1,), (256,), self.act_cnt, _i32(B), self.stats_acc)
        t2 = ph.lap("lsh_query", t1)
        _memset0(self.cntN)
        self.k_output((B,), (256,), self.h, self.W2, self.b2, self.act, self.act_cnt, _i32(self.stride), s.yptr,
                      s.yidx, _i32(batch.r0), _i32(B), self.vals, self.dh, self.loss, self.cntN, self.pos)
        t3 = ph.lap("output_fwd_softmax", t2)
        self.scan(self.cntN, self.N, self.startN)
        self.k_ascatter((B,), (256,), self.act, self.act_cnt, _i32(self.stride), self.pos, self.startN, self.listN)
        t4 = ph.lap("output_bwd", t3)
        self.nnz_sum += self._feature_lists(batch)
        t5 = ph.lap("hidden_bwd", t4)
        self.t += 1
        _memset0(self.nrows)
        self._adam_rows(self.W2, self.mW2, self.vW2, self.b2, self.mb2, self.vb2, self.N, self.startN, self.listN,
                        self.vals, self.stride, 0, self.h, self.lazy, 1)
        self._update_w1_b1(batch, self.dh, self.lazy)
        ph.lap("update", t5)
        self._last_B = B
        self.steps += 1
        self.samples += B

    def epoch_stats(self) -> Dict[str, float]:
        """The base's, with this epoch's work (reference.WORK)."""
        wk = [int(x) for x in self.work.get()]
        steps = self.steps
        entries = int(self.stats_acc.get()[0])
        work = {"steps": steps, "samples": self.samples, "entries": entries, "nnz": self.nnz_sum,
                "rows_w1": wk[1], "rows_w2": wk[2], "gathered": wk[0], "rows_hashed": self.hashed}
        self.work.fill(0)
        self.nnz_sum = self.hashed = 0
        out = super().epoch_stats()
        if steps or work["rows_hashed"]:
            out.update(work)
        return out

    def last_active(self) -> ActiveDev:
        """The active sets of the last step (device arrays; ``.host()`` for a reference.Active)."""
        B = self._last_B
        return ActiveDev(self.act[:B], self.act_cnt[:B], self.overflow)


# ============================================================================ dense baselines


class DenseGPU(_Engine):
    """Full softmax over every label (``dense_fp32`` / ``dense_tf32``): h W2^T, softmax and the
    three products of the backward pass through cuBLAS (TF32 tensor cores with precision="tf32"),
    the same Adam (W2 and b2 every row; W1 as the optimizer says, like the NumPy DenseEngine)."""

    def __init__(self, ctx, hp: ref.Hyper, params: ref.Params, n_features: int, n_labels: int,
                 tf32: bool = False, precision: Optional[str] = None):
        super().__init__(ctx, hp, params, n_features, n_labels)
        cp = _cp()
        precision = precision or ("tf32" if tf32 else "fp32")
        if precision not in ("fp32", "tf32"):
            raise ConfigError(f"dense precision {precision!r}: expected fp32 or tf32")
        self.precision = precision
        self.name = f"dense_{precision}"
        def tk(name, sig):
            return _fast(self.train_mod.kernel(name, sig))
        self.k_softmax = tk("dense_softmax_xent", "PPiPPiiP")
        self.k_colsum = tk("col_sums", "PiiP")
        self.k_mask = tk("relu_mask", "PPi")
        self.k_adam_dense = tk("adam_dense", "PPPPqffff")
        self.gW2 = cp.empty((self.N, self.H), cp.float32)
        self.gb2 = cp.empty(self.N, cp.float32)
        self._B = 0

    def set_hash(self, bins, node_order) -> None:
        pass

    def rebuild(self) -> None:
        pass

    def _buffers(self, B: int) -> None:
        cp = _cp()
        if B <= self._B:
            return
        self._B = B
        self.h = cp.empty((B, self.H), cp.float32)
        self.dh = cp.empty((B, self.H), cp.float32)
        self.Z = cp.empty((B, self.N), cp.float32)

    def step(self, batch: DeviceBatch, pad_off=None) -> None:
        from pipeline.gpu.blas import sgemm
        hp, B, s = self.hp, len(batch), batch.split
        self._buffers(B)
        h, dh, Z = self.h[:B], self.dh[:B], self.Z[:B]
        ph = self.phases
        t0 = ph.start()
        self._input(batch, h)
        t1 = ph.lap("input_fwd", t0)
        sgemm(h, self.W2, Z, trans_b=True, precision=self.precision)
        self.k_softmax((B,), (1024,), Z, self.b2, _i32(self.N), s.yptr, s.yidx, _i32(batch.r0), _i32(B), self.loss)
        t2 = ph.lap("output_fwd_softmax", t1)
        sgemm(Z, h, self.gW2, trans_a=True, precision=self.precision)
        self.k_colsum((-(-self.N // 256),), (256,), Z, _i32(B), _i32(self.N), self.gb2)
        sgemm(Z, self.W2, dh, precision=self.precision)
        t3 = ph.lap("output_bwd", t2)
        self.k_mask((-(-(B * self.H) // 256),), (256,), dh, h, _i32(B * self.H))
        self._feature_lists(batch)
        t4 = ph.lap("hidden_bwd", t3)
        self.t += 1
        f = np.float32
        lr = f(self.lr_t())
        n2 = self.N * self.H
        self.k_adam_dense((min(4096, -(-n2 // 1024)),), (256,), self.W2, self.mW2, self.vW2, self.gW2, np.int64(n2),
                          lr, f(hp.beta1), f(hp.beta2), f(hp.eps))
        self.k_adam_dense((min(4096, -(-self.N // 1024) + 1),), (256,), self.b2, self.mb2, self.vb2, self.gb2,
                          np.int64(self.N), lr, f(hp.beta1), f(hp.beta2), f(hp.eps))
        _memset0(self.nrows)
        self._update_w1_b1(batch, dh, self.lazy)
        ph.lap("update", t4)
        self.stats_acc[0] += np.uint64(B * self.N)
        self.stats_acc[1] = np.uint64(self.N)
        self.steps += 1
        self.samples += B


class TorchDense:
    """PyTorch full softmax (variant ``torch``, TF32 matmuls): the same network, targets and Adam
    written with torch ops; sparse input through index_add_. Needs torch with CUDA."""

    name = "torch"

    def __init__(self, ctx, hp: ref.Hyper, params: ref.Params, n_features: int, n_labels: int):
        import torch
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        self.torch = torch
        self.hp, self.F, self.N, self.H = hp, int(n_features), int(n_labels), int(hp.hidden)
        dev = torch.device("cuda")
        self.dev = dev
        names = ("W1", "b1", "W2", "b2", "mW1", "vW1", "mb1", "vb1", "mW2", "vW2", "mb2", "vb2")
        for n in names:
            setattr(self, n, torch.as_tensor(np.ascontiguousarray(getattr(params, n), np.float32), device=dev))
        self.t = int(params.t)
        self.lazy = hp.optimizer == "lazy_adam"
        self.loss = torch.zeros((), dtype=torch.float64, device=dev)
        self.steps = self.samples = 0
        self.phases = _Phases(elapsed_ms=lambda a, b: a.elapsed_time(b))   # torch.cuda.Event pairs
        self._splits: Dict[int, dict] = {}

    def set_hash(self, bins, node_order) -> None:
        pass

    def rebuild(self) -> None:
        pass

    def _split(self, split) -> dict:
        torch = self.torch
        split = getattr(split, "host", split)          # a DeviceSplit: its host arrays
        key = id(split)
        d = self._splits.get(key)
        if d is None:
            X, Y = split.X.tocsr(), split.Y.tocsr()
            d = dict(ref=split, xptr=X.indptr.astype(np.int64), yptr=Y.indptr.astype(np.int64),
                     xidx=torch.as_tensor(X.indices.astype(np.int64), device=self.dev),
                     xval=torch.as_tensor(X.data.astype(np.float32), device=self.dev),
                     yidx=torch.as_tensor(Y.indices.astype(np.int64), device=self.dev))
            self._splits[key] = d
        return d

    def batch(self, split, r0: int, r1: int, order=None):
        if order is not None:
            rows = np.asarray(order[r0:r1])
            split = getattr(split, "host", split)
            split = ref.HostBatch(split.X[rows], split.Y[rows])
            r0, r1 = 0, len(rows)
        return (self._split(split), int(r0), int(r1))

    def _event(self):
        e = self.torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def _hidden(self, d, r0, r1):
        torch = self.torch
        a, b = int(d["xptr"][r0]), int(d["xptr"][r1])
        lens = torch.as_tensor(np.diff(d["xptr"][r0:r1 + 1]), device=self.dev)
        rows = torch.repeat_interleave(torch.arange(r1 - r0, device=self.dev), lens)
        idx, val = d["xidx"][a:b], d["xval"][a:b]
        pre = torch.zeros((r1 - r0, self.H), device=self.dev)
        pre.index_add_(0, rows, self.W1[idx] * val[:, None])
        return torch.relu(pre + self.b1), rows, idx, val

    def _adam(self, w, m, v, g, lr_t, rows=None):
        hp = self.hp
        if rows is None:
            m.mul_(hp.beta1).add_(g, alpha=1 - hp.beta1)
            v.mul_(hp.beta2).addcmul_(g, g, value=1 - hp.beta2)
            w.addcdiv_(m, v.sqrt().add_(hp.eps), value=-lr_t)
        else:
            gr = g[rows]
            mr = m[rows].mul_(hp.beta1).add_(gr, alpha=1 - hp.beta1)
            vr = v[rows].mul_(hp.beta2).addcmul_(gr, gr, value=1 - hp.beta2)
            m[rows], v[rows] = mr, vr
            w[rows] = w[rows] - lr_t * mr / (vr.sqrt() + hp.eps)

    def step(self, batch, pad_off=None) -> None:
        torch = self.torch
        d, r0, r1 = batch
        B = r1 - r0
        e0 = self._event()
        h, rows, idx, val = self._hidden(d, r0, r1)
        e1 = self._event()
        z = torch.addmm(self.b2, h, self.W2.t())
        logp = torch.log_softmax(z, dim=1)
        ya, yb = int(d["yptr"][r0]), int(d["yptr"][r1])
        nl = torch.as_tensor(np.diff(d["yptr"][r0:r1 + 1]), device=self.dev)
        yrows = torch.repeat_interleave(torch.arange(B, device=self.dev), nl)
        y = torch.zeros_like(z)
        y[yrows, d["yidx"][ya:yb]] = (1.0 / nl.clamp(min=1).float())[yrows]
        self.loss += -(y * logp).sum().double() / B
        dz = (logp.exp() - y) * ((nl > 0).float() / B)[:, None]
        e2 = self._event()
        gW2 = dz.t() @ h
        gb2 = dz.sum(0)
        dh = (dz @ self.W2) * (h > 0)
        e3 = self._event()
        gW1 = torch.zeros_like(self.W1)
        gW1.index_add_(0, idx, dh[rows] * val[:, None])
        gb1 = dh.sum(0)
        e4 = self._event()
        self.t += 1
        hp = self.hp
        lr_t = hp.lr * math.sqrt(1.0 - hp.beta2 ** self.t) / (1.0 - hp.beta1 ** self.t)
        self._adam(self.W2, self.mW2, self.vW2, gW2, lr_t)
        self._adam(self.b2, self.mb2, self.vb2, gb2, lr_t)
        self._adam(self.W1, self.mW1, self.vW1, gW1, lr_t, torch.unique(idx) if self.lazy else None)
        self._adam(self.b1, self.mb1, self.vb1, gb1, lr_t)
        e5 = self._event()
        self.phases.pairs += [("input_fwd", e0, e1), ("output_fwd_softmax", e1, e2), ("output_bwd", e2, e3),
                       ("hidden_bwd", e3, e4), ("update", e4, e5)]
        self.steps += 1
        self.samples += B

    def phase_times(self) -> Dict[str, float]:
        return self.phases.take()

    def epoch_stats(self) -> Dict[str, float]:
        loss = float(self.loss.item())
        out = {"loss": loss / max(self.steps, 1), "active_mean": float(self.N), "active_max": float(self.N),
               "overflow_samples": 0, "overflow_dropped": 0, "table_dropped": 0, "rebuilds": 0}
        self.loss.zero_()
        self.steps = self.samples = 0
        return out

    def predict_topk(self, X, k: int, eval_batch: int = 4096) -> np.ndarray:
        torch = self.torch
        import scipy.sparse as sp
        X = sp.csr_matrix(X)
        n = X.shape[0]
        rows = max(1, min(int(eval_batch), EVAL_BYTES // (4 * self.N)))
        out = np.zeros((n, min(k, self.N)), np.int64)
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            sub = ref.HostBatch(X[r0:r1], sp.csr_matrix((r1 - r0, 1), dtype=np.float32))
            d = self._split(sub)
            h, _, _, _ = self._hidden(d, 0, r1 - r0)
            z = torch.addmm(self.b2, h, self.W2.t())
            # stable top-k: sort by (-z, id)
            _, idx = torch.sort(-z, dim=1, stable=True)
            out[r0:r1] = idx[:, :out.shape[1]].cpu().numpy()
            del self._splits[id(sub)]
        return out

    def params(self) -> ref.Params:
        names = ("W1", "b1", "W2", "b2", "mW1", "vW1", "mb1", "vb1", "mW2", "vW2", "mb2", "vb2")
        return ref.Params(**{n: getattr(self, n).cpu().numpy() for n in names}, t=self.t)

    def mem_used_bytes(self) -> int:
        return int(self.torch.cuda.memory_allocated())


def make_engine(variant: str, ctx, hp: ref.Hyper, params: ref.Params, n_features: int, n_labels: int):
    """The GPU engine of a variant name (slide, dense_fp32, dense_tf32, torch)."""
    if variant == "slide":
        return SlideGPU(ctx, hp, params, n_features, n_labels)
    if variant in ("dense_fp32", "dense_tf32"):
        return DenseGPU(ctx, hp, params, n_features, n_labels, precision=variant.split("_")[1])
    if variant == "torch":
        return TorchDense(ctx, hp, params, n_features, n_labels)
    raise ConfigError(f"slide GPU variant {variant!r}: expected slide, dense_fp32, dense_tf32 or torch")
