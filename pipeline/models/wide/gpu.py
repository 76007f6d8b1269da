"""GPU trainers of the wide models: ``flow`` (fused persistent kernel, in memory or out of core),
``stage`` (three kernels per mini-batch) and ``torch`` (PyTorch sparse embedding ops, a framework
baseline). Each trainer: ``set_params(p)``, ``epoch(order) -> (train_loss, gpu_ms)``, ``params()``.
``order`` is an epoch's chunk order or a slice of it (model.evals_per_epoch, cut between mini-batches):
training the slices in turn trains the same steps as the whole; ``train_loss`` is the summed loss of
the order's samples over the epoch's n samples (the mean when the order is the whole epoch)."""
from __future__ import annotations

import math
import os
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from pipeline.gpu import kernels, transfer       # neither imports PyCUDA or CuPy until it is used
from pipeline.models.wide.prep import WideData
from pipeline.models.wide.reference import Params, chunks_per_step
from pipeline.models.wide.variants import (caches_hot_accumulators, hot_cache_bytes, hot_fixed_exponent,
                                           hot_square_exponent, packed_width)

STAGE_THREADS = 256


def kernel_defines(mc, data: WideData) -> Dict[str, int]:
    return {"K": int(mc.k), "C": int(data.chunk), "R": int(mc.replicas), "H": max(1, min(int(data.hot), data.d))}


def load_module(mc, data: WideData):
    return kernels.load("wide", "wide.cu", defines=kernel_defines(mc, data))


class _Base:
    """What our trainers share: the steps the config asks for, the loss sum on the device and the
    timing of an epoch's launches."""

    def __init__(self, data: WideData, mc, ctx):
        import cupy as cp
        self.cp, self.data, self.mc, self.ctx = cp, data, mc, ctx
        self.k = int(mc.k)
        self.sm = ctx.device.sm_count if ctx.device else 132
        self.update = str(mc["update"])
        self.loss = cp.zeros(1, cp.float64)
        self.per = chunks_per_step(self.update, int(mc.batch_size), data.chunk)
        self.batch_chunks = max(1, int(mc.batch_size) // data.chunk)
        self.denom = self.batch_chunks * data.chunk     # update=chunk: a chunk applies its share of a batch
        self.lr = float(mc.lr)

    def _events(self):
        import pycuda.driver as drv
        return drv.Event(), drv.Event()

    def _timed(self, launches: Callable[[], None]) -> Tuple[float, float]:
        """(train_loss, ms between CUDA events) of an epoch (or a slice of one) that ``launches()`` enqueues."""
        self.loss.fill(0)
        start, end = self._events()
        start.record()
        launches()
        end.record()
        end.synchronize()
        return float(self.loss.get()[0]) / self.data.n, end.time_since(start)


class _Vectors(_Base):
    """Parameters as the vectors w (d), v (d x k, row-major) and b, with gradient buffers of the same."""

    def __init__(self, data: WideData, mc, ctx):
        super().__init__(data, mc, ctx)
        cp, d = self.cp, data.d
        self.w, self.gw = cp.zeros(d, cp.float32), cp.zeros(d, cp.float32)
        self.v, self.gv = cp.zeros(max(1, d * self.k), cp.float32), cp.zeros(max(1, d * self.k), cp.float32)
        self.b, self.gb = cp.zeros(1, cp.float32), cp.zeros(1, cp.float32)

    def set_params(self, p: Params) -> None:
        cp = self.cp
        self.w[...] = cp.asarray(p.w, cp.float32)
        self.b[...] = float(p.b)
        if self.k:
            self.v[...] = cp.asarray(np.asarray(p.V, np.float32).ravel())

    def params(self) -> Params:
        V = self.v.get().reshape(self.data.d, self.k) if self.k else None
        return Params(self.w.get(), float(self.b.get()[0]), V)


class FlowTrainer(_Vectors):
    """update=chunk: one launch per epoch, every chunk applies its share (lr / (chunks per batch x
    chunk) per sample) at once, asynchronously; update=batch: per mini-batch one fused launch into
    gradient buffers and one commit launch (the paper's synchronous text)."""

    def __init__(self, data: WideData, mc, ctx, budget_bytes: int):
        super().__init__(data, mc, ctx)
        self.mod = load_module(mc, data)
        self.train = self.mod.kernel("flow_train", "PiPPPPPPiPPPPPPfP")
        kernels.require_block(self.train, int(mc.threads), "model.threads", mc.threads,
                              f"model.threads<={self.train.max_threads}")
        self.commit = self.mod.kernel("flow_commit", "PiPPPPPPPP")
        defs = kernel_defines(mc, data)
        nq = 1 + 2 * self.k
        self.smem = 4 * (nq * data.chunk * int(mc.replicas) + data.chunk + data.chunk * self.k
                         + defs["H"] * (1 + self.k) + 2)
        self.max_grid = max(1, min(int(mc.blocks_per_sm) * self.sm, inflight_chunks(mc, self.batch_chunks)))
        self.threads = int(mc.threads)
        # samples whose updates a forward may not yet see (blocks in flight x chunk, or the mini-batch)
        self.in_flight = (self.max_grid if self.update == "chunk" else self.per) * data.chunk
        self.out_of_core = data.edge_bytes > budget_bytes
        self.overlap: List[float] = []
        if self.out_of_core:
            self._setup_pieces(budget_bytes)
        else:
            self.dev = transfer.upload_all({"cptr": data.cptr, "chot": data.chot, "fid": data.fid,
                                            "sid": data.sid, "val": data.val, "y": data.ytr})

    def _launch(self, order_dev, n_order, dev, n, target, scale, stream=None):
        grid = max(1, min(n_order, self.max_grid))
        tw, tv, tb = target
        self.train((grid,), (self.threads,), order_dev, np.int32(n_order), dev["cptr"], dev["chot"], dev["fid"],
                   dev["sid"], dev["val"], dev["y"], np.int32(n), self.w, self.v, self.b, tw, tv, tb,
                   np.float32(scale), self.loss, shared=self.smem, stream=stream)

    def _train(self, order: np.ndarray, order_dev, dev, n: int, stream=None) -> None:
        """Enqueue the training of the chunks ``order`` (``order_dev``: its copy on the device) of the
        chunk arrays ``dev`` (all of them, or a piece's, of ``n`` rows)."""
        if self.update == "chunk":
            self._launch(order_dev, len(order), dev, n, (self.w, self.v, self.b), -self.lr / self.denom, stream)
            return
        for i in range(0, len(order), self.per):
            cs = order[i:i + self.per]
            view = order_dev[i:i + len(cs)]
            self._launch(view, len(cs), dev, n, (self.gw, self.gv, self.gb), -self.lr / self.data.rows_of(cs, n),
                         stream)
            self.commit((max(1, min(len(cs), self.max_grid)),), (self.threads,), view, np.int32(len(cs)), dev["cptr"],
                        dev["fid"], self.w, self.v, self.b, self.gw, self.gv, self.gb, stream=stream)

    def epoch(self, order: np.ndarray) -> Tuple[float, float]:
        if self.out_of_core:
            return self._epoch_ooc(order)
        order_dev = self.cp.asarray(order.astype(np.int32))
        return self._timed(lambda: self._train(order, order_dev, self.dev, self.data.n))

    # -------------------------------------------------------------- out of core
    def _setup_pieces(self, budget_bytes: int) -> None:
        """Cut the chunks into pieces of about budget / (streams + 1) bytes, in pinned host memory."""
        pinned_like = transfer.pinned_like
        data = self.data
        per_chunk = max(1, data.edge_bytes // max(1, data.n_chunks))
        target = max(per_chunk, budget_bytes // (int(self.mc.streams) + 1))
        cpc = max(1, int(target // per_chunk))
        if self.update == "batch":
            cpc = max(self.per, cpc // self.per * self.per)
        self.pinned = {k: pinned_like(getattr(data, k)) for k in ("fid", "sid", "val", "ytr")}
        self.pieces = []
        for a in range(0, data.n_chunks, cpc):
            b = min(a + cpc, data.n_chunks)
            e0, e1 = int(data.cptr[a]), int(data.cptr[b])
            r0, r1 = a * data.chunk, min(b * data.chunk, data.n)
            self.pieces.append(dict(a=a, b=b, n=r1 - r0,
                                    cptr=pinned_like(data.cptr[a:b + 1] - e0), chot=pinned_like(data.chot[a:b] - e0),
                                    fid=self.pinned["fid"][e0:e1], sid=self.pinned["sid"][e0:e1],
                                    val=self.pinned["val"][e0:e1], y=self.pinned["ytr"][r0:r1]))
        self.copy_ms = None

    def _copy_only_ms(self, tuples) -> float:
        import pycuda.driver as drv
        s = transfer.stream()
        bufs = [self.cp.empty(max(t[j].nbytes for t in tuples) // 4 + 1, np.float32) for j in range(len(tuples[0]))]
        start, end = self._events()
        start.record(s)
        for t in tuples:
            for buf, host in zip(bufs, t):
                drv.memcpy_htod_async(int(buf.data.ptr), host, s)
        end.record(s)
        end.synchronize()
        return end.time_since(start)

    def _epoch_ooc(self, order: np.ndarray) -> Tuple[float, float]:
        """Pieces in a shuffled order (chunks shuffled inside each piece), streamed through
        ``streams`` device buffers: the copy of the next pieces overlaps the kernel on this one."""
        rank = np.empty(self.data.n_chunks, np.int64)
        rank[order] = np.arange(len(order))
        pieces = sorted(self.pieces, key=lambda p: rank[p["a"]])
        tuples = []
        for p in pieces:
            loc = np.arange(p["b"] - p["a"], dtype=np.int32)
            loc = loc[np.argsort(rank[p["a"]:p["b"]], kind="stable")]
            tuples.append((transfer.pinned_like(loc), p["cptr"], p["chot"], p["fid"], p["sid"], p["val"], p["y"]))
        if self.copy_ms is None:
            self.copy_ms = self._copy_only_ms(tuples)
        self.loss.fill(0)
        self.cp.cuda.Device().synchronize()
        feeder = transfer.ChunkFeeder(tuples, depth=int(self.mc.streams))
        kern = []
        t0 = time.perf_counter()
        for i, bufs in feeder:
            ev0, ev1 = self._events()
            ev0.record(feeder.compute_stream)
            dev = dict(zip(("order", "cptr", "chot", "fid", "sid", "val", "y"), bufs))
            self._train(tuples[i][0], dev["order"], dev, pieces[i]["n"], feeder.compute_stream)
            ev1.record(feeder.compute_stream)
            kern.append((ev0, ev1))
        wall = (time.perf_counter() - t0) * 1e3
        compute = float(sum(b.time_since(a) for a, b in kern))
        self.overlap.append((self.copy_ms + compute - wall) / max(1e-9, min(self.copy_ms, compute)))
        return float(self.loss.get()[0]) / self.data.n, wall


def inflight_chunks(mc, batch_chunks: int) -> int:
    """Chunks in flight with update=chunk (a chunk reads parameters up to that many chunk-steps
    stale): ``model.inflight``, or ``model.inflight_batches`` mini-batches (LR: 2, about the authors'
    kernel, 56 blocks x 32-sample chunks = 1792 samples; FM: 1). Generated criteo-s-like data at lr 0.5
    keeps LR's validation loss of strict mini-batches at two (measured, docs/journal/wide.md), loses
    some at four and diverges at eight; FM k=10 ended 0.0036 above cpu at two."""
    return int(mc.inflight) or int(mc.get("inflight_batches", 1)) * batch_chunks


def spread_rows(d: int, keep: int) -> np.ndarray:
    """Parameter row of each of d features: features < keep (hot: cached or sharded) in place, the
    rest in a seeded random order over rows keep..d-1 (the warp design's spread rows)."""
    row = np.arange(d, dtype=np.int32)
    row[keep:] = keep + np.random.default_rng(12345).permutation(d - keep).astype(np.int32)
    return row


def csr_bytes(data: WideData) -> int:
    """Device bytes of the training CSR the warp design reads (indptr, indices, data, labels)."""
    return int(8 * (data.n + 1) + 8 * data.Xtr.nnz + 4 * data.n)


def warp_geometry(mc, data: WideData, sm: int, optimizer: Optional[str] = None) -> Dict[str, int]:
    """Samples per warp step, lanes per sample, edges per lane in registers, warps in flight (update=chunk:
    ``model.inflight`` chunks, default ``model.inflight_batches`` mini-batches, of samples), warps per block, shards,
    from ``model.warp`` and the data. ``optimizer``: the one to train (the model passes its resolved
    ``model.optimizer``); None: the config's as written (``adagrad`` trains AdaGrad; ``sgd`` and ``auto`` SGD)."""
    wc = mc.warp
    ws = int(wc.samples)
    wg = 32 // ws
    k = int(mc.k)
    kp = packed_width(k)
    epl = int(wc.edges_per_lane)
    if not epl:
        lens = np.diff(data.Xtr.indptr)
        q = float(np.percentile(lens, 99)) if len(lens) else 1.0
        cap = 16 if k == 0 else max(1, 96 // kp)          # FM: the rows of the lane's edges stay in registers
        epl = int(min(cap, max(1, -(-int(np.ceil(q)) // wg))))
    batch_chunks = max(1, int(mc.batch_size) // data.chunk)
    samples = inflight_chunks(mc, batch_chunks) * data.chunk
    nw = max(1, min(-(-samples // ws), 32 * sm))
    hc = min(int(wc.hot_cache), data.d) // 4 * 4
    wpb = int(wc.warps_per_block)
    if not wpb:
        # a block on every SM; with a hot-row cache at least 2 warps share it (fewer, fuller blocks)
        wpb = next((w for w in (8, 4, 2) if -(-nw // w) >= (sm // 2 if hc else sm)), 2 if hc and nw > 1 else 1)
    nsh = max(1, int(wc.shards))
    hsh = min(int(wc.shard_hot), data.d) if nsh > 1 else 0
    wpf = int(wc.prefetch) or (2 if kp * epl <= 48 else 1)   # registers: (wpf + 1) x epl edges
    opt = str(mc.get("optimizer", "sgd")) if optimizer is None else str(optimizer)
    ada = opt == "adagrad"
    hq = aq = 0
    x = data.Xtr.data
    xmax = max(float(x.max()), -float(x.min())) if hc and x.size else 0.0   # the largest |x|
    spbs = ws * max(1, min(wpb, nw))                         # samples a block step
    if hc:
        # the cached rows' step sums in fixed point where the resolution allows (float atomics on shared
        # memory are compare-and-swap loops: LR at the full criteo-s shape 5.89 ms an epoch against 5.16,
        # H100). The largest per-edge gradient of a cached row: AdaGrad's step is at most adagrad_lr (its
        # accumulator holds the step's own square); SGD's lr / batch x |delta| (< 1) x |x|
        step = (float(mc.get("adagrad_lr", 0.0)) if ada
                else float(mc.lr) / (batch_chunks * data.chunk) * xmax)
        hq = hot_fixed_exponent(k, hc, str(mc.get("update", "chunk")), step, spbs)
    ahc = bool(hc) and caches_hot_accumulators(mc, opt)     # hc: the cache as the geometry rounds it
    if ahc:
        aq = hot_square_exponent(spbs, xmax * xmax, float(mc.get("adagrad_init", 0.0)))   # |delta| < 1
    return {"WS": ws, "WG": wg, "WEPL": epl, "NSH": nsh if hsh else 1, "HSH": hsh, "WPF": wpf, "nw": nw,
            "wpb": wpb, "kp": kp, "HC": hc, "OPT": int(ada), "HQ": hq, "AHC": int(ahc), "AQ": aq,
            "smem": hot_cache_bytes(hc, k, ahc)}


class FlowWarpTrainer(_Base):
    """model.design=warp (``cuda/wide/wide.cu:flow_warp``, the design in docs/models/wide.md): a warp
    per ``model.warp.samples`` sample(s). update=chunk: one launch per epoch; update=batch: per
    mini-batch one launch into gradient buffers and a commit launch. Parameters live in ``P`` (d x
    kp), ``Psh`` (shards 1.. of the hot rows) and ``bb`` (bias shards, 32 floats apart); ``params()``
    folds the shards. ``optimizer``: as :func:`warp_geometry` takes it; ``bias_lr``: with AdaGrad,
    the bias's SGD step (per mini-batch of ``batch_size``, as ``model.lr``; None: ``model.lr``): the
    kernel steps the bias by its ``scale`` argument, -bias_lr / batch a sample, and w, V by AdaGrad."""

    def __init__(self, data: WideData, mc, ctx, optimizer: Optional[str] = None, bias_lr: Optional[float] = None):
        super().__init__(data, mc, ctx)
        cp = self.cp
        self.geo = geo = warp_geometry(mc, data, self.sm, optimizer)
        self.kp = geo["kp"]
        self.nsh, self.hsh = geo["NSH"], geo["HSH"]
        defines = dict(kernel_defines(mc, data))
        defines.update({k: geo[k] for k in ("WS", "WEPL", "NSH", "HSH", "WPF", "HC")})
        defines.update({k: geo[k] for k in ("HQ", "OPT", "AHC", "AQ") if geo[k]})     # the kernel's default: 0
        self.mod = kernels.load("wide", "wide.cu", defines=defines)
        self.train = self.mod.kernel("flow_warp", "PiPPPPiiPPPPPPifPPPf")
        kernels.require_block(self.train, 32 * max(1, min(geo["wpb"], geo["nw"])), "model.warp.warps_per_block",
                              geo["wpb"], f"model.warp.warps_per_block<={self.train.max_threads // 32} (0: auto)")
        self.commit = self.mod.kernel("warp_commit", "PiiPPPPPP")
        d, kp = data.d, self.kp
        self.P = cp.zeros(d * kp, cp.float32)
        self.Psh = cp.zeros(max(1, (self.nsh - 1) * self.hsh * kp), cp.float32)
        self.bb = cp.zeros(32 * self.nsh, cp.float32)
        # AdaGrad: accumulators of per-sample squared gradients, laid out as P and Psh
        self.adagrad = bool(geo["OPT"])
        self.ada_lr, self.ada_init = float(mc.get("adagrad_lr", 0.0)), float(mc.get("adagrad_init", 0.0))
        self.A = cp.zeros(d * kp if self.adagrad else 1, cp.float32)
        self.Ash = cp.zeros(max(1, (self.nsh - 1) * self.hsh * kp) if self.adagrad else 1, cp.float32)
        if self.update == "batch":
            self.Gr = cp.zeros(d * kp, cp.float32)
            self.gb = cp.zeros(32, cp.float32)
        # update=chunk: the kernel's scale steps the bias (and with SGD w and V) by -scale x delta a sample
        self.bias_lr = float(bias_lr) if (self.adagrad and bias_lr is not None) else self.lr
        self.in_flight = geo["nw"] * geo["WS"] if self.update == "chunk" else self.per * data.chunk
        self.out_of_core = False
        X = data.Xtr
        # parameter row of each feature: the hot rows (cached or sharded) stay in place, the rest are
        # spread over the table by a seeded permutation: renumbering by frequency puts features of
        # similar frequency side by side, so the warm ones would share 128-byte lines and their
        # gathers and REDs would queue on the same L2 lines (LR, criteo-s shape at scale 0.2, H200:
        # gather + RED of the features past the 256 hottest 2.15 ms in frequency order, 0.47 spread)
        self.keep = max(geo["HC"], geo["HSH"])
        self.row = spread_rows(d, self.keep) if d - self.keep > 1 else None
        idx = X.indices.astype(np.int32) if self.row is None else self.row[X.indices]
        self.dev = transfer.upload_all({"indptr": X.indptr.astype(np.int64), "indices": idx,
                                        "data": X.data.astype(np.float32), "y": data.ytr})

    def describe(self) -> str:
        g = self.geo
        ada = ""
        if self.adagrad:
            parts = ["per-lane atomics"]
            if g["AHC"]:
                parts.append("hot accumulators cached"
                             + (f" (squares in fixed point, 2^-{g['AQ']})" if g["AQ"] else ""))
            parts.append(f"the bias by SGD at {self.bias_lr:.3g} a mini-batch")
            ada = f", adagrad ({', '.join(parts)})"
        return (f"flow design=warp{ada}: {g['nw']} warps in flight x {g['WS']} "
                f"sample(s) ({g['WG']} lanes each, "
                f"{g['WEPL']} edges/lane in registers, loaded {g['WPF']} steps ahead), {g['wpb']} warps/block, "
                f"hot rows {g['HSH']} x {g['NSH']} shards, {g['HC']} hot rows cached per block"
                + (f" (step gradient in fixed point, 2^-{g['HQ']})" if g["HQ"] else "") + ", "
                f"packed rows of {self.kp} floats" + (f", rows past {self.keep} spread" if self.row is not None else ""))

    def set_params(self, p: Params) -> None:
        cp = self.cp
        rows = np.zeros((self.data.d, self.kp), np.float32)      # feature f's row: self.row[f] (spread)
        at = slice(None) if self.row is None else self.row
        rows[at, 0] = np.asarray(p.w, np.float32)
        if self.k:
            rows[at, 1:1 + self.k] = np.asarray(p.V, np.float32)
        self.P[...] = cp.asarray(rows.ravel())
        self.Psh.fill(0)
        self.bb.fill(0)
        self.bb[0] = float(p.b)
        if self.adagrad:
            self.A.fill(self.ada_init)
            self.Ash.fill(0)

    def _fold(self) -> None:
        """Add the shards into shard 0 (the sum, i.e. the model, is unchanged); between launches."""
        if self.nsh > 1:
            P = self.P.reshape(self.data.d, self.kp)
            P[:self.hsh] += self.Psh.reshape(self.nsh - 1, self.hsh, self.kp).sum(0)
            self.Psh.fill(0)
            if self.adagrad:
                A = self.A.reshape(self.data.d, self.kp)
                A[:self.hsh] += self.Ash.reshape(self.nsh - 1, self.hsh, self.kp).sum(0)
                self.Ash.fill(0)
        b = self.bb[::32].sum()
        self.bb.fill(0)
        self.bb[0] = b

    def _by_feature(self, table, b: float) -> Params:
        """A d x kp table laid out as ``P`` (``P`` or ``A``, shards folded) as Params, in feature order."""
        T = table.reshape(self.data.d, self.kp).get()
        if self.row is not None:
            T = T[self.row]
        return Params(T[:, 0].copy(), b, T[:, 1:1 + self.k].copy() if self.k else None)

    def params(self) -> Params:
        self._fold()
        return self._by_feature(self.P, float(self.bb[:1].get()[0]))

    def accumulators(self) -> Params:
        """AdaGrad's accumulators of w and V, in feature order (the bias has none: it steps by SGD)."""
        self._fold()
        return self._by_feature(self.A, float("nan"))

    def _launch(self, order_dev, n_order, target, shard_writes, scale, nw):
        g = self.geo
        wpb = max(1, min(g["wpb"], nw))
        grid = -(-nw // wpb)
        T, Tsh, tb = target
        self.train((grid,), (32 * wpb,), order_dev, np.int32(n_order), self.dev["indptr"], self.dev["indices"],
                   self.dev["data"], self.dev["y"], np.int32(self.data.n), np.int32(nw), self.P, self.Psh, self.bb,
                   T, Tsh, tb, np.int32(shard_writes), np.float32(scale), self.loss, self.A, self.Ash,
                   np.float32(-self.ada_lr), shared=g["smem"])

    def _train(self, order: np.ndarray, order_dev) -> None:
        data = self.data
        if self.update == "chunk":
            self._launch(order_dev, len(order), (self.P, self.Psh, self.bb), 1, -self.bias_lr / self.denom,
                         self.geo["nw"])
            return
        upc = data.chunk // self.geo["WS"]
        for i in range(0, len(order), self.per):
            cs = order[i:i + self.per]
            view = order_dev[i:i + len(cs)]
            self._launch(view, len(cs), (self.Gr, self.Psh, self.gb), 0, -self.lr / data.rows_of(cs),
                         min(len(cs) * upc, 32 * 1024))
            self.commit((max(1, min(len(cs), 1024)),), (256,), view, np.int32(len(cs)), np.int32(data.n),
                        self.dev["indptr"], self.dev["indices"], self.P, self.bb, self.Gr, self.gb)

    def epoch(self, order: np.ndarray) -> Tuple[float, float]:
        order_dev = self.cp.asarray(order.astype(np.int32))
        return self._timed(lambda: self._train(order, order_dev))


class StageTrainer(_Vectors):
    """Per mini-batch (always strict): SpMV, gradient, apply. An epoch's launches are one CUDA graph
    over a device copy of the chunk order (docs/models/wide.md: why), captured once per order length
    (the slices of model.evals_per_epoch have two or three) and replayed; eager where capture fails."""

    def __init__(self, data: WideData, mc, ctx):
        super().__init__(data, mc, ctx)
        self.per = max(1, int(mc.batch_size) // data.chunk)
        self.in_flight = self.per * data.chunk          # strict mini-batches
        self.mod = load_module(mc, data)
        self.spmv = self.mod.kernel("stage_spmv", "PiiPPPPPPPP")
        self.grad = self.mod.kernel("stage_grad", "PiiPPPPPPPPPPP")
        self.apply = self.mod.kernel("stage_apply", "PiiPPPPPPPPf")
        X = data.Xtr
        self.dev = transfer.upload_all({"indptr": X.indptr.astype(np.int64), "indices": X.indices.astype(np.int32),
                                        "data": X.data.astype(np.float32), "y": data.ytr})
        B = self.per * data.chunk
        self.z = self.cp.zeros(B, self.cp.float32)
        self.a2 = self.cp.zeros(max(1, B * self.k), self.cp.float32)
        self.order_dev = self.cp.zeros(max(1, data.n_chunks), self.cp.int32)
        self.replays: Dict[int, object] = {}      # order length -> replay of its steps

    def _steps(self, n_order: int) -> None:
        data, dev = self.data, self.dev
        n = np.int32(data.n)
        for i in range(0, n_order, self.per):
            nc = min(self.per, n_order - i)
            view = self.order_dev[i:i + nc]
            grid = ((nc * data.chunk * 32 + STAGE_THREADS - 1) // STAGE_THREADS,)
            batch = (grid, (STAGE_THREADS,), view, np.int32(nc), n, dev["indptr"], dev["indices"])
            self.spmv(*batch, dev["data"], self.w, self.v, self.b, self.z, self.a2)
            self.grad(*batch, dev["data"], dev["y"], self.z, self.a2, self.v, self.gw, self.gv, self.gb, self.loss)
            self.apply(*batch, self.w, self.v, self.b, self.gw, self.gv, self.gb, np.float32(-self.lr))

    def epoch(self, order: np.ndarray) -> Tuple[float, float]:
        self.order_dev[:len(order)] = self.cp.asarray(order.astype(np.int32))
        replay = self.replays.get(len(order))
        if replay is None:
            from pipeline.gpu.graphs import try_capture
            replay, _ = try_capture(lambda: self._steps(len(order)), self.ctx.notice, "stage")
            self.replays[len(order)] = replay
        return self._timed(replay)


class TorchTrainer:
    """Framework baseline: the same strict mini-batch SGD in PyTorch (embedding lookups with sparse
    gradients, index_add segment sums, BCE-with-logits, torch.optim.SGD). The per-batch index arrays
    are built on the GPU from the epoch's chunk order before the timed loop."""

    def __init__(self, data: WideData, mc, ctx):
        import torch
        self.torch, self.data, self.mc = torch, data, mc
        self.k = int(mc.k)
        self.per = max(1, int(mc.batch_size) // data.chunk)
        self.in_flight = self.per * data.chunk          # strict mini-batches
        self.dev = dev = torch.device("cuda", int(ctx.cfg.gpu))
        X = data.Xtr
        self.indptr = torch.as_tensor(X.indptr.astype(np.int64), device=dev)
        self.indices = torch.as_tensor(X.indices.astype(np.int64), device=dev)
        self.vals = torch.as_tensor(X.data.astype(np.float32), device=dev)
        self.y = torch.as_tensor(data.ytr, device=dev)
        self.w = torch.zeros(data.d, 1, device=dev, requires_grad=True)
        self.b = torch.zeros(1, device=dev, requires_grad=True)
        ps = [self.w, self.b]
        if self.k:
            self.V = torch.zeros(data.d, self.k, device=dev, requires_grad=True)
            ps.append(self.V)
        self.opt = torch.optim.SGD(ps, lr=float(mc.lr))
        self.host_indptr = X.indptr

    def set_params(self, p: Params) -> None:
        t = self.torch
        with t.no_grad():
            self.w.copy_(t.as_tensor(np.asarray(p.w, np.float32)[:, None], device=self.dev))
            self.b.fill_(float(p.b))
            if self.k:
                self.V.copy_(t.as_tensor(np.asarray(p.V, np.float32), device=self.dev))

    def params(self) -> Params:
        return Params(self.w.detach().cpu().numpy()[:, 0].copy(), float(self.b.item()),
                      self.V.detach().cpu().numpy().copy() if self.k else None)

    def _batches(self, order):
        t, data = self.torch, self.data
        out = []
        for i in range(0, len(order), self.per):
            cs = np.asarray(order[i:i + self.per], np.int64)
            r0 = cs * data.chunk
            r1 = np.minimum(r0 + data.chunk, data.n)
            rows = np.concatenate([np.arange(a, b) for a, b in zip(r0, r1)])
            e0, e1 = self.host_indptr[rows], self.host_indptr[rows + 1]
            lens = (e1 - e0).astype(np.int64)
            eidx = np.repeat(e0 - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(lens.sum())
            seg = np.repeat(np.arange(len(rows)), lens)
            out.append((t.as_tensor(eidx, device=self.dev), t.as_tensor(seg, device=self.dev),
                        t.as_tensor(rows, device=self.dev), len(rows)))
        return out

    def epoch(self, order: np.ndarray) -> Tuple[float, float]:
        t = self.torch
        F = t.nn.functional
        batches = self._batches(order)
        t.cuda.synchronize()
        start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        start.record()
        total = t.zeros((), device=self.dev, dtype=t.float64)
        for eidx, seg, rows, nb in batches:
            idx = self.indices[eidx]
            x = self.vals[eidx]
            wg = F.embedding(idx, self.w, sparse=True)[:, 0]
            z = t.zeros(nb, device=self.dev).index_add(0, seg, wg * x) + self.b
            if self.k:
                vg = F.embedding(idx, self.V, sparse=True) * x[:, None]
                xv = t.zeros(nb, self.k, device=self.dev).index_add(0, seg, vg)
                x2v2 = t.zeros(nb, self.k, device=self.dev).index_add(0, seg, vg * vg)
                z = z + 0.5 * (xv * xv - x2v2).sum(1)
            loss = F.binary_cross_entropy_with_logits(z, self.y[rows])
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            total += loss.detach().double() * nb
        end.record()
        end.synchronize()
        return float(total.item()) / self.data.n, start.elapsed_time(end)


_PUBLISH: Dict[int, Tuple[float, float]] = {}


def publication_us(ctx, steps: int = 2000) -> Tuple[float, float]:
    """Microseconds a grid-wide publication of updates takes on this GPU (docs/models/wide.md,
    x_of_step_bound): ``steps`` steps of ``p_chain`` (``cuda/wide/probe.cu``), one block per SM, each
    block waiting until every block has published that step (lag 0: a grid barrier) or the step
    before (lag 1). Returns (lag 0, lag 1) us a step, measured once per process and device."""
    dev = int(ctx.device.index) if ctx.device is not None else 0
    if dev in _PUBLISH:
        return _PUBLISH[dev]
    tool = next((v for v in ("PIPELINE_CUDA_TOOL", "CUDA_INJECTION64_PATH") if os.environ.get(v)), None)
    if tool:
        # under a CUDA tool (compute-sanitizer, a profiler): its instrumentation would be measured, and
        # the spinning grid barrier may not have every block resident
        ctx.notice(f"a CUDA tool is attached ({tool}): the grid-wide publication latency is not "
                   "measured, x_of_step_bound is NaN")
        _PUBLISH[dev] = (math.nan, math.nan)
        return _PUBLISH[dev]
    import cupy as cp
    from pipeline.gpu.timer import time_cuda
    chain = kernels.load("wide", "probe.cu").kernel("p_chain", "iiPiiP")
    sm = ctx.device.sm_count if ctx.device else 132
    counter = cp.zeros(2, cp.uint32)                 # arrivals; [1]: a block gave up waiting (not all resident)
    hot = cp.zeros(1, cp.float32)
    out = []
    for lag in (0, 1):
        def run(lag=lag):
            counter[:1].fill(0)
            chain((sm,), (256,), np.int32(steps), np.int32(lag), hot, np.int32(0), np.int32(1), counter)
        out.append(time_cuda(run, ctx.cfg.bench).median_ms / steps * 1e3)
    if int(counter[1].get()):
        ctx.notice("the grid-wide publication probe's blocks were not all resident (a CUDA tool attached, or "
                   "another process on the GPU): not measured, x_of_step_bound is NaN")
        out = [math.nan, math.nan]
    _PUBLISH[dev] = (out[0], out[1])
    return _PUBLISH[dev]
