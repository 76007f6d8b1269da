"""SLIDE (LSH-sampled softmax training) in NumPy: the definition the GPU trainer must match,
specified in docs/models/slide.md ("The network and one training step" and its subsections).

Network: sparse input x -> h = relu(x W1 + b1) -> N output labels whose softmax runs over a
per-sample *active set*: the neurons found in the sample's L WTA/DWTA hash buckets (those seen in
at least ``threshold`` tables), plus its labels in training, padded by walking ``node_order`` to
``min(min_active, N)``, truncated to ``max_active``. Adam updates every row (``adam``) or only the
rows a step touched (``lazy_adam``). One host ``Generator(PCG64(seed))`` draws everything, in the
order of docs/models/slide.md, "Schedule and random numbers".

Storage is float32; sums run in float64 where that is cheap. Every function is dtype-generic so a
float64 copy of the parameters gives float64 results (the finite-difference checks use that).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

PHASES = ("input_fwd", "lsh_query", "output_fwd_softmax", "output_bwd", "hidden_bwd", "update", "rebuild")
# The work of the steps and rebuilds, counted by every SLIDE engine per epoch (floors.phase_bytes):
# samples, active entries, input non-zeros, W1 / W2 rows updated, bucket ids gathered by the query,
# W2 rows hashed by the rebuilds.
WORK = ("steps", "samples", "entries", "nnz", "rows_w1", "rows_w2", "gathered", "rows_hashed")


# ----------------------------------------------------------------------------- hyper-parameters


@dataclass
class Hyper:
    hidden: int = 128
    K: int = 6
    L: int = 50
    bin_size: int = 8
    dwta: bool = False
    bucket_capacity: int = 128
    threshold: int = 1
    min_active: int = 1500
    max_active: int = 0               # 0: no limit (from_cfg resolves 0 from the data)
    lr: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    optimizer: str = "lazy_adam"
    init_std: float = 0.01
    rebuild_every: int = 6400         # samples; 0: never
    rebuild_decay: float = 1.0
    reshuffle_every: int = 128000     # samples; 0: never

    @property
    def bits(self) -> int:
        return max(1, math.ceil(math.log2(self.bin_size)))

    @property
    def nbuckets(self) -> int:
        return 1 << (self.K * self.bits)

    @classmethod
    def from_cfg(cls, mcfg, n_labels: int, max_labels_per_row: int) -> "Hyper":
        """From the model config. ``min_active`` unset (null) becomes 1500, or 5 % of the labels
        when fewer, at least 32, at most half of them (:func:`variants.default_min_active`), and at
        most an explicit ``max_active``. ``max_active: 0`` becomes min(N, L*bucket_capacity + the
        most labels of a training row), never below min(min_active, N), so nothing is ever truncated."""
        from pipeline.models.slide.variants import default_min_active
        kw = {}
        for f in fields(cls):
            if f.name == "dwta":
                kw["dwta"] = str(mcfg.get("hash", "wta")) == "dwta"
            elif f.name in mcfg and mcfg[f.name] is not None:
                kw[f.name] = type(f.default)(mcfg[f.name])
        if mcfg.get("min_active", None) is None:
            auto = default_min_active(n_labels)
            kw["min_active"] = min(auto, int(kw["max_active"])) if kw.get("max_active", 0) > 0 else auto
        hp = cls(**kw)
        if hp.max_active <= 0:
            auto = hp.L * hp.bucket_capacity + int(max_labels_per_row)
            hp.max_active = int(min(n_labels, max(auto, hp.min_active)))
        return hp


# ----------------------------------------------------------------------------- state


@dataclass
class Params:
    """Weights (W1 (F, H), b1 (H,), W2 (N, H), b2 (N,)), Adam moments of each, and t = steps done."""
    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray
    b2: np.ndarray
    mW1: np.ndarray
    vW1: np.ndarray
    mb1: np.ndarray
    vb1: np.ndarray
    mW2: np.ndarray
    vW2: np.ndarray
    mb2: np.ndarray
    vb2: np.ndarray
    t: int = 0

    WEIGHTS = ("W1", "b1", "W2", "b2")

    def copy(self, dtype=None) -> "Params":
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        for k, v in kw.items():
            if isinstance(v, np.ndarray):
                kw[k] = v.astype(dtype or v.dtype, copy=True)
        return Params(**kw)

    @property
    def dtype(self):
        return self.W1.dtype


@dataclass
class Grads:
    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray
    b2: np.ndarray
    rows_W1: np.ndarray            # features present in the batch (sorted)
    rows_W2: np.ndarray            # neurons in the union of the batch's active sets (sorted)


@dataclass
class Tables:
    offsets: np.ndarray            # (L, nbuckets+1) int64: bucket c of table t = ids[t, offsets[t,c]:offsets[t,c+1]]
    ids: np.ndarray                # (L, N) int32, -1 past offsets[t, -1]
    dropped: int = 0               # inserts overwritten by the FIFO

    def members(self, t: int, bucket: int) -> np.ndarray:
        return self.ids[t, self.offsets[t, bucket]:self.offsets[t, bucket + 1]]


@dataclass
class Active:
    off: np.ndarray                # (B+1,) int64
    ids: np.ndarray                # int32, each sample's ids ascending
    overflow_samples: int = 0      # samples whose set was truncated to max_active
    overflow_dropped: int = 0      # neurons removed by those truncations
    gathered: int = 0              # ids read from the samples' L buckets (before dedup)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.off)

    def of(self, b: int) -> np.ndarray:
        return self.ids[self.off[b]:self.off[b + 1]]

    def host(self) -> "Active":
        return self

    @classmethod
    def full(cls, B: int, N: int) -> "Active":
        return cls(np.arange(B + 1, dtype=np.int64) * N, np.tile(np.arange(N, dtype=np.int32), B))


def init_params(F: int, N: int, hp: Hyper, rng: np.random.Generator) -> Params:
    """W1, b1, W2, b2 in that order from normal(0, init_std), float32; zero moments; t = 0."""
    H = hp.hidden
    W1, b1, W2, b2 = (rng.normal(0.0, hp.init_std, size=shape).astype(np.float32)
                      for shape in ((F, H), H, (N, H), N))
    z = np.zeros_like
    return Params(W1, b1, W2, b2, z(W1), z(W1), z(b1), z(b1), z(W2), z(W2), z(b2), z(b2), 0)


def labels_of(Y: sp.csr_matrix) -> List[np.ndarray]:
    """The label ids of each row of a CSR label matrix (sorted, int32)."""
    ind = Y.indices.astype(np.int32, copy=False)
    return [ind[Y.indptr[i]:Y.indptr[i + 1]] for i in range(Y.shape[0])]


def _label_csr(labels, N: int) -> sp.csr_matrix:
    if sp.issparse(labels):
        return labels.tocsr()
    lens = np.array([len(x) for x in labels], np.int64)
    ind = np.concatenate([np.asarray(x, np.int64) for x in labels]) if len(labels) else np.zeros(0, np.int64)
    ptr = np.concatenate([[0], np.cumsum(lens)])
    Y = sp.csr_matrix((np.ones(ind.size, np.float32), ind, ptr), shape=(len(labels), N))
    Y.sum_duplicates()
    Y.sort_indices()
    return Y


# ----------------------------------------------------------------------------- hashing


def draw_hash(hp: Hyper, rng: np.random.Generator) -> np.ndarray:
    """bins (K*L, bin_size) int32: concatenated rng.permutation(hidden) arrays, first K*L*bin_size."""
    need = hp.K * hp.L * hp.bin_size
    perms = [rng.permutation(hp.hidden) for _ in range(-(-need // hp.hidden))]
    return np.concatenate(perms)[:need].reshape(hp.K * hp.L, hp.bin_size).astype(np.int32)


def wta_codes(V: np.ndarray, bins: np.ndarray, hp: Hyper, chunk: int = 2048) -> Tuple[np.ndarray, np.ndarray]:
    """codes (n, L, K) int32 and buckets (n, L) int64 of the rows of V (n, hidden)."""
    V = np.asarray(V)
    n, K, L = V.shape[0], hp.K, hp.L
    codes = np.empty((n, L, K), np.int32)
    for r0 in range(0, n, chunk):
        G = V[r0:r0 + chunk][:, bins]                      # (c, K*L, bin_size)
        c = np.argmax(G, axis=2).reshape(-1, L, K)         # first maximum wins
        if hp.dwta:
            empty = (G.max(axis=2) <= 0).reshape(-1, L, K)
            out = np.where(empty, 0, c)
            for r in range(K - 1, 0, -1):                  # smallest r applied last wins
                src_ok = ~np.roll(empty, -r, axis=2)
                out = np.where(empty & src_ok, np.roll(c, -r, axis=2), out)
            c = out
        codes[r0:r0 + chunk] = c
    shifts = ((K - 1 - np.arange(K)) * hp.bits).astype(np.int64)
    buckets = (codes.astype(np.int64) << shifts).sum(axis=2)
    return codes, buckets


def build_tables(W2: np.ndarray, bins: np.ndarray, node_order: np.ndarray, hp: Hyper) -> Tables:
    """Hash every output neuron into the L tables in ``node_order``; each bucket keeps its last
    ``bucket_capacity`` inserts in insertion order."""
    N, L, nb, cap = W2.shape[0], hp.L, hp.nbuckets, hp.bucket_capacity
    node_order = np.asarray(node_order, np.int64)
    _, bk = wta_codes(W2, bins, hp)                        # (N, L)
    key = (np.arange(L, dtype=np.int64)[:, None] * nb + bk[node_order].T).ravel()   # (t, rank) order
    order = np.argsort(key, kind="stable")                 # by (table, bucket, insertion rank)
    sk = key[order]
    start = np.flatnonzero(np.concatenate([[True], sk[1:] != sk[:-1]]))
    counts = np.diff(np.concatenate([start, [sk.size]]))
    pos = np.arange(sk.size) - np.repeat(start, counts)
    keep = pos >= np.repeat(counts, counts) - cap
    kk, members = sk[keep], node_order[order[keep] % N]
    t_of = kk // nb
    per = np.bincount(kk, minlength=L * nb).reshape(L, nb)
    offsets = np.zeros((L, nb + 1), np.int64)
    np.cumsum(per, axis=1, out=offsets[:, 1:])
    ids = np.full((L, N), -1, np.int32)
    tstart = np.searchsorted(t_of, np.arange(L))
    ids[t_of, np.arange(kk.size) - tstart[t_of]] = members
    return Tables(offsets, ids, int((~keep).sum()))


# ----------------------------------------------------------------------------- query


def query(h: np.ndarray, tables: Tables, bins: np.ndarray, hp: Hyper, node_order: np.ndarray,
          pad_off: np.ndarray, labels: Optional[Sequence[np.ndarray]] = None) -> Active:
    """The active set of every row of h (B, hidden); ``labels`` (training) join the set."""
    B, L = h.shape[0], hp.L
    node_order = np.asarray(node_order, np.int64)
    N = node_order.size
    _, bk = wta_codes(h, bins, hp)                         # (B, L)
    tt = np.broadcast_to(np.arange(L), (B, L))
    starts = tables.offsets[tt, bk].ravel()
    lens = (tables.offsets[tt, bk + 1].ravel() - starts)
    tot = int(lens.sum())
    first = np.repeat(np.cumsum(lens) - lens, lens)
    pos = np.arange(tot) - first + np.repeat(starts, lens)
    ids = tables.ids[np.repeat(tt.ravel(), lens), pos].astype(np.int64)
    key = np.repeat(np.repeat(np.arange(B, dtype=np.int64), L), lens) * N + ids
    ukey, cnt = np.unique(key, return_counts=True)
    keep = cnt >= hp.threshold
    ukey, cnt = ukey[keep], cnt[keep]
    if labels is not None:
        lab = _label_csr(labels, N)
        lkey = np.repeat(np.arange(B, dtype=np.int64), np.diff(lab.indptr)) * N + lab.indices
    else:
        lkey = np.zeros(0, np.int64)
    members = np.union1d(ukey, lkey)                       # sorted (sample, id) keys
    mb = members // N
    size = np.bincount(mb, minlength=B)

    # pad: walk node_order from pad_off[b] and add absent ids until min(min_active, N)
    target = min(hp.min_active, N)
    need = np.maximum(target - size, 0)
    pkey = np.zeros(0, np.int64)
    if need.any():
        walk = np.where(need > 0, np.minimum(need + size, N), 0)
        wb = np.repeat(np.arange(B, dtype=np.int64), walk)
        step = np.arange(int(walk.sum())) - np.repeat(np.cumsum(walk) - walk, walk)
        wkey = wb * N + node_order[(np.asarray(pad_off, np.int64)[wb] + step) % N]
        absent = ~np.isin(wkey, members)
        rank = np.cumsum(absent) - 1                       # rank among the absent, per sample
        first = np.concatenate([[0], np.cumsum(absent)])[np.cumsum(walk) - walk]
        take = absent & (rank - first[wb] < need[wb])
        pkey = wkey[take]                                  # walk order within each sample

    total = size + np.bincount(pkey // N, minlength=B)
    keys = np.sort(np.concatenate([members, pkey]))
    cap = hp.max_active if hp.max_active > 0 else None
    o_samples = o_dropped = 0
    if cap is not None and (total > cap).any():
        over = np.flatnonzero(total > cap)
        kb = keys // N
        keep = ~np.isin(kb, over)
        parts = [keys[keep]]
        lb = lkey // N
        pb = pkey // N
        for b in over:                                     # labels, candidates by count, pads
            lab_b = lkey[lb == b] % N
            sel_c = ukey // N == b
            c_ids, c_cnt = ukey[sel_c] % N, cnt[sel_c]
            other = ~np.isin(c_ids, lab_b)
            c_ids, c_cnt = c_ids[other], c_cnt[other]
            ranked = np.concatenate([lab_b, c_ids[np.lexsort((c_ids, -c_cnt))], pkey[pb == b] % N])
            parts.append(b * N + ranked[:cap])
            o_samples += 1
            o_dropped += int(total[b]) - cap
        keys = np.sort(np.concatenate(parts))
    off = np.zeros(B + 1, np.int64)
    np.cumsum(np.bincount(keys // N, minlength=B), out=off[1:])
    return Active(off, (keys % N).astype(np.int32), o_samples, o_dropped, tot)


# ----------------------------------------------------------------------------- forward / backward


def hidden(Xb: sp.csr_matrix, params: Params) -> np.ndarray:
    """h = relu(Xb W1 + b1) (B, hidden)."""
    a = np.asarray(Xb.astype(params.dtype) @ params.W1) + params.b1
    return np.maximum(a, 0).astype(params.dtype, copy=False)


def _rows(off: np.ndarray) -> np.ndarray:
    """The sample of every entry of a CSR layout with row offsets ``off``."""
    return np.repeat(np.arange(off.size - 1), np.diff(off))


def _seg_reduce(ufunc, x: np.ndarray, off: np.ndarray, empty) -> np.ndarray:
    sizes = np.diff(off)
    out = np.full(sizes.size, empty, dtype=x.dtype)
    ne = sizes > 0
    if ne.any():
        out[ne] = ufunc.reduceat(x, off[:-1][ne])
    return out


def active_logits(h: np.ndarray, params: Params, active: Active) -> np.ndarray:
    """z of every (sample, active neuron) entry, in the order of active.ids."""
    rows = _rows(active.off)
    ids = active.ids.astype(np.int64)
    B, N = h.shape[0], params.W2.shape[0]
    z = np.empty(ids.size, params.dtype)
    if B * N <= 8 * max(ids.size, 1) or B * N <= 4_000_000:
        for r0 in range(0, B, 256):                         # dense h W2^T per chunk of rows, gathered
            lo, hi = active.off[r0], active.off[min(B, r0 + 256)]
            Z = h[r0:r0 + 256] @ params.W2.T
            z[lo:hi] = Z[rows[lo:hi] - r0, ids[lo:hi]]
    else:
        for b in range(B):
            lo, hi = active.off[b], active.off[b + 1]
            z[lo:hi] = params.W2[ids[lo:hi]] @ h[b]
    return z + params.b2[ids]


def output_forward(h: np.ndarray, labels, params: Params, active: Active):
    """Softmax cross-entropy over the active sets. Returns (loss, dz (nnz,), labelled (B,)):
    dz = (p - y)/B for labelled samples, 0 for unlabelled ones; y = 1/|labels| on label entries."""
    B, N = h.shape[0], params.W2.shape[0]
    Y = _label_csr(labels, N)
    z = active_logits(h, params, active).astype(np.float64)
    rows = _rows(active.off)
    zmax = _seg_reduce(np.maximum, z, active.off, -np.inf)
    e = np.exp(z - zmax[rows])
    s = _seg_reduce(np.add, e, active.off, 0.0)
    p = e / s[rows]
    nlab = np.diff(Y.indptr)
    lab_keys = np.repeat(np.arange(B, dtype=np.int64), nlab) * N + Y.indices
    is_lab = np.isin(rows.astype(np.int64) * N + active.ids, lab_keys)
    y = np.where(is_lab, 1.0 / np.maximum(nlab, 1)[rows], 0.0)
    logp = z - zmax[rows] - np.log(s)[rows]
    loss = float(-(y * logp).sum() / B) if B else 0.0
    labelled = nlab > 0
    dz = np.where(labelled[rows], (p - y) / B, 0.0)
    return loss, dz, labelled


def output_backward(h: np.ndarray, dz: np.ndarray, params: Params, active: Active):
    """gW2 (N, H), gb2 (N,), dh (B, H) before the ReLU mask; W2 as before the update."""
    B, N = h.shape[0], params.W2.shape[0]
    dZ = sp.csr_matrix((dz.astype(params.dtype), active.ids, active.off), shape=(B, N))
    gW2 = np.asarray(dZ.T @ h, dtype=params.dtype)
    gb2 = np.bincount(active.ids, weights=dz, minlength=N).astype(params.dtype)
    dh = np.asarray(dZ @ params.W2, dtype=params.dtype)
    return gW2, gb2, dh


def hidden_backward(Xb: sp.csr_matrix, h: np.ndarray, dh: np.ndarray, params: Params):
    """gW1 (F, H), gb1 (H,) from dh masked by h > 0."""
    dh = dh * (h > 0)
    gW1 = np.asarray(Xb.T.astype(params.dtype) @ dh, dtype=params.dtype)
    gb1 = dh.sum(axis=0, dtype=np.float64).astype(params.dtype)
    return gW1, gb1


def forward_backward(Xb: sp.csr_matrix, labels, params: Params, active: Active, hp: Hyper):
    """(loss, grads, h) of one batch over the given active sets."""
    h = hidden(Xb, params)
    loss, dz, _ = output_forward(h, labels, params, active)
    gW2, gb2, dh = output_backward(h, dz, params, active)
    gW1, gb1 = hidden_backward(Xb, h, dh, params)
    grads = Grads(gW1, gb1, gW2, gb2, np.unique(Xb.indices).astype(np.int64),
                  np.unique(active.ids).astype(np.int64))
    return loss, grads, h


def dense_forward_backward(Xb: sp.csr_matrix, labels, params: Params, hp: Hyper):
    """The same step with every neuron active (the dense full-softmax baseline)."""
    B, N = Xb.shape[0], params.W2.shape[0]
    h = hidden(Xb, params)
    Y = _label_csr(labels, N)
    z = (h @ params.W2.T + params.b2).astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    nlab = np.diff(Y.indptr)
    y = np.asarray(Y.multiply(1.0 / np.maximum(nlab, 1)[:, None]).todense(), np.float64)
    loss = float(-(y * logp).sum() / B) if B else 0.0
    dz = (np.exp(logp) - y) / B * (nlab > 0)[:, None]
    gb2 = dz.sum(axis=0).astype(params.dtype)
    dz = dz.astype(params.dtype)
    gW2 = dz.T @ h
    gW1, gb1 = hidden_backward(Xb, h, dz @ params.W2, params)
    grads = Grads(gW1, gb1, gW2, gb2, np.unique(Xb.indices).astype(np.int64), np.arange(N, dtype=np.int64))
    return loss, grads, h


# ----------------------------------------------------------------------------- Adam


def adam_update(params: Params, grads: Grads, hp: Hyper, touched=None) -> None:
    """One Adam step in place (t += 1). ``adam``: every row. ``lazy_adam``: W1 rows ``touched[0]``
    (default: features in the batch), W2/b2 rows ``touched[1]`` (default: the union of the active
    sets), all of b1; other rows keep w, m and v."""
    params.t += 1
    t = params.t
    lr_t = hp.lr * math.sqrt(1.0 - hp.beta2 ** t) / (1.0 - hp.beta1 ** t)
    b1, b2, eps = hp.beta1, hp.beta2, hp.eps
    lazy = hp.optimizer == "lazy_adam"
    if lazy:
        r1, r2 = touched if touched is not None else (grads.rows_W1, grads.rows_W2)
        r1, r2 = np.asarray(r1, np.int64), np.asarray(r2, np.int64)
    for name in Params.WEIGHTS:
        w, g = getattr(params, name), getattr(grads, name)
        m, v = getattr(params, "m" + name), getattr(params, "v" + name)
        rows = None if not lazy or name == "b1" else (r1 if name == "W1" else r2)
        if rows is not None and rows.size == w.shape[0]:   # every row touched: the dense update
            rows = None
        if rows is None:
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * (g * g)
            w -= lr_t * m / (np.sqrt(v) + eps)
        else:
            gr = g[rows]
            mr = b1 * m[rows] + (1 - b1) * gr
            vr = b2 * v[rows] + (1 - b2) * (gr * gr)
            m[rows], v[rows] = mr, vr
            w[rows] = w[rows] - lr_t * mr / (np.sqrt(vr) + eps)


def train_step(Xb: sp.csr_matrix, labels, params: Params, tables: Tables, bins: np.ndarray,
               node_order: np.ndarray, pad_off: np.ndarray, hp: Hyper):
    """Query, forward/backward and Adam for one batch; returns (loss, active)."""
    h = hidden(Xb, params)
    active = query(h, tables, bins, hp, node_order, pad_off, labels)
    loss, grads, _ = forward_backward(Xb, labels, params, active, hp)
    adam_update(params, grads, hp)
    return loss, active


# ----------------------------------------------------------------------------- evaluation


def topk_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """(n, k) ids of the k largest logits of each row, largest first, ties to the lower id."""
    n, N = logits.shape
    k = min(k, N)
    if k == N:
        return np.argsort(-logits, axis=1, kind="stable")[:, :k]
    part = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(logits, part, axis=1)
    kth = vals.min(axis=1)
    ties = (logits >= kth[:, None]).sum(axis=1) > k
    order = np.lexsort((part, -vals), axis=1)
    out = np.take_along_axis(part, order, axis=1)
    for i in np.flatnonzero(ties):
        out[i] = np.argsort(-logits[i], kind="stable")[:k]
    return out


def predict_topk(X: sp.csr_matrix, params: Params, k: int, eval_batch: int = 4096) -> np.ndarray:
    """Top-k ids over the full output layer, chunks of eval_batch rows."""
    out = []
    for r0 in range(0, X.shape[0], eval_batch):
        h = hidden(X[r0:r0 + eval_batch], params)
        out.append(topk_ids(h @ params.W2.T + params.b2, k))
    return np.concatenate(out) if out else np.zeros((0, k), np.int64)


def precision_at_k(topk: np.ndarray, Y: sp.csr_matrix, ks=(1, 5)) -> Dict[str, float]:
    """P@k = mean over rows of |top-k ∩ labels| / k (rows without labels count as 0)."""
    topk = np.asarray(topk, np.int64)
    n = topk.shape[0]
    if n == 0:
        return {f"p@{k}": float("nan") for k in ks}
    Y = Y.tocsr()
    ykeys = np.repeat(np.arange(n, dtype=np.int64), np.diff(Y.indptr)) * Y.shape[1] + Y.indices
    hits = np.isin(np.arange(n, dtype=np.int64)[:, None] * Y.shape[1] + topk, ykeys)
    return {f"p@{k}": float(hits[:, :k].sum() / (n * k)) for k in ks}


# ----------------------------------------------------------------------------- the trainers


class HostBatch:
    """Rows of a host split (what the NumPy engines step on)."""

    def __init__(self, X: sp.csr_matrix, Y: sp.csr_matrix):
        self.X, self.Y = X, Y
        self.labels = labels_of(Y)

    def __len__(self) -> int:
        return self.X.shape[0]


class _Clock:
    def __init__(self):
        self.ms = {p: 0.0 for p in PHASES}
        self._t = 0.0

    def start(self):
        self._t = time.perf_counter()

    def lap(self, phase):
        t = time.perf_counter()
        self.ms[phase] += (t - self._t) * 1e3
        self._t = t

    def take(self) -> Dict[str, float]:
        out, self.ms = self.ms, {p: 0.0 for p in PHASES}
        return out


class _StepStats:
    def __init__(self):
        self.reset()

    def reset(self):
        self.loss_sum = 0.0
        self.steps = self.samples = self.active_sum = self.active_max = 0
        self.overflow_samples = self.overflow_dropped = self.dropped = self.rebuilds = 0
        self.work = dict.fromkeys(WORK, 0)

    def add_step(self, loss: float, samples: int, entries: int, largest: int) -> None:
        self.loss_sum += loss
        self.steps += 1
        self.samples += samples
        self.active_sum += entries
        self.active_max = max(self.active_max, largest)

    def take(self) -> Dict[str, float]:
        counted = self.work["steps"] or self.work["rows_hashed"]          # SLIDE engines; not the dense ones
        out = {"loss": self.loss_sum / max(self.steps, 1),
               "active_mean": self.active_sum / max(self.samples, 1),
               "active_max": self.active_max, "overflow_samples": self.overflow_samples,
               "overflow_dropped": self.overflow_dropped, "table_dropped": self.dropped,
               "rebuilds": self.rebuilds, **(self.work if counted else {})}
        self.reset()
        return out


class ReferenceEngine:
    """The NumPy SLIDE step (the ``cpu`` variant); SlideGPU implements the same interface."""

    def __init__(self, hp: Hyper, params: Params, n_features: int, n_labels: int):
        self.hp, self.p, self.F, self.N = hp, params, n_features, n_labels
        self.bins = self.node_order = self.tables = None
        self.clock, self.stats = _Clock(), _StepStats()

    def batch(self, split, r0: int, r1: int, order: Optional[np.ndarray] = None) -> HostBatch:
        rows = slice(r0, r1) if order is None else order[r0:r1]
        return HostBatch(split.X[rows], split.Y[rows])

    def set_hash(self, bins: np.ndarray, node_order: np.ndarray) -> None:
        self.bins, self.node_order = np.asarray(bins, np.int32), np.asarray(node_order, np.int64)

    def rebuild(self) -> None:
        """The tables of the current W2 (every row hashed)."""
        self.clock.start()
        self.tables = build_tables(self.p.W2, self.bins, self.node_order, self.hp)
        self.stats.work["rows_hashed"] += self.N
        self.stats.dropped += self.tables.dropped
        self.stats.rebuilds += 1
        self.clock.lap("rebuild")

    def step(self, batch: HostBatch, pad_off: np.ndarray) -> None:
        c, p, hp = self.clock, self.p, self.hp
        c.start()
        h = hidden(batch.X, p)
        c.lap("input_fwd")
        act = query(h, self.tables, self.bins, hp, self.node_order, pad_off, batch.labels)
        c.lap("lsh_query")
        loss, dz, _ = output_forward(h, batch.Y, p, act)
        c.lap("output_fwd_softmax")
        gW2, gb2, dh = output_backward(h, dz, p, act)
        c.lap("output_bwd")
        gW1, gb1 = hidden_backward(batch.X, h, dh, p)
        c.lap("hidden_bwd")
        grads = Grads(gW1, gb1, gW2, gb2, np.unique(batch.X.indices).astype(np.int64),
                      np.unique(act.ids).astype(np.int64))
        adam_update(p, grads, hp)
        lazy = hp.optimizer == "lazy_adam"
        c.lap("update")
        s = self.stats
        w = s.work
        w["steps"] += 1
        w["samples"] += len(batch)
        w["entries"] += int(act.ids.size)
        w["nnz"] += int(batch.X.nnz)
        w["rows_w1"] += grads.rows_W1.size if lazy else self.F
        w["rows_w2"] += grads.rows_W2.size if lazy else self.N
        w["gathered"] += act.gathered
        s.add_step(loss, len(batch), int(act.ids.size), int(act.sizes.max(initial=0)))
        s.overflow_samples += act.overflow_samples
        s.overflow_dropped += act.overflow_dropped
        self.last_active = act

    def phase_times(self) -> Dict[str, float]:
        return self.clock.take()

    def epoch_stats(self) -> Dict[str, float]:
        return self.stats.take()

    def predict_topk(self, X: sp.csr_matrix, k: int, eval_batch: int = 4096) -> np.ndarray:
        return predict_topk(X, self.p, k, eval_batch)

    def params(self) -> Params:
        return self.p

    def mem_used_bytes(self) -> int:
        n = sum(v.nbytes for v in vars(self.p).values() if isinstance(v, np.ndarray))
        if self.tables is not None:
            n += self.tables.offsets.nbytes + self.tables.ids.nbytes
        return int(n)


class DenseEngine(ReferenceEngine):
    """NumPy full softmax over all N (the ``cpu_dense`` baseline): no hashing, every W2 row active."""

    def set_hash(self, bins, node_order) -> None:
        pass

    def rebuild(self) -> None:
        pass

    def step(self, batch: HostBatch, pad_off: np.ndarray) -> None:
        c = self.clock
        c.start()
        loss, grads, _ = dense_forward_backward(batch.X, batch.Y, self.p, self.hp)
        c.lap("output_fwd_softmax")
        adam_update(self.p, grads, self.hp)
        c.lap("update")
        self.stats.add_step(loss, len(batch), len(batch) * self.N, self.N)


class SlideTrainer:
    """The host side of SLIDE training, the same for every engine: the one RNG (parameters, hash
    functions, node order, pad offsets, shuffles) and the rebuild/reshuffle schedule. Dense engines
    ignore the hash draws but the RNG stream (hence the data order) is the same. The first tables
    are built by the first step (inside the training time, like every later rebuild).
    ``make_engine(params)`` -> the engine that owns the parameters (default: ReferenceEngine)."""

    def __init__(self, hp: Hyper, n_features: int, n_labels: int, seed: int, make_engine=None,
                 shuffle: bool = False):
        self.hp, self.F, self.N, self.shuffle = hp, n_features, n_labels, shuffle
        self.rng = np.random.Generator(np.random.PCG64(seed))
        params = init_params(n_features, n_labels, hp, self.rng)
        make_engine = make_engine or (lambda p: ReferenceEngine(hp, p, n_features, n_labels))
        self.engine = make_engine(params)
        self.S = 0
        self.period = float(hp.rebuild_every)
        self.next_rebuild = float(hp.rebuild_every) if hp.rebuild_every > 0 else math.inf
        self.next_reshuffle = float(hp.reshuffle_every) if hp.reshuffle_every > 0 else math.inf
        self.rebuilds = self.reshuffles = 0
        self.order: Optional[np.ndarray] = None       # the current epoch's sample order (shuffle)
        self.bins = draw_hash(self.hp, self.rng)
        self.node_order = self.rng.permutation(self.N)
        self.engine.set_hash(self.bins, self.node_order)
        self.built = False

    def _rebuild(self, first: bool = False) -> None:
        self.engine.rebuild()
        self.rebuilds += 1
        self.built = True
        if not first:
            self.period *= self.hp.rebuild_decay
            self.next_rebuild = self.S + self.period if self.hp.rebuild_every > 0 else math.inf

    def step(self, batch, n: int) -> None:
        if not self.built:
            self._rebuild(first=True)
        pad_off = self.rng.integers(0, self.N, size=n)
        self.engine.step(batch, pad_off)
        self.S += n
        if self.S >= self.next_reshuffle:
            self.bins = draw_hash(self.hp, self.rng)
            self.node_order = self.rng.permutation(self.N)
            self.engine.set_hash(self.bins, self.node_order)
            self.reshuffles += 1
            self.next_reshuffle += self.hp.reshuffle_every
            self._rebuild()
        elif self.S >= self.next_rebuild:
            self._rebuild()

    def epoch(self, split, n_rows: int, batch_size: int, progress=None, rows: int = 0,
              steps: Optional[Tuple[int, int]] = None) -> None:
        """One pass over ``split`` (``n_rows`` rows) in batches: in file order, or in a fresh rng
        permutation when shuffling; ``rows`` > 0 stops after that many samples. ``steps=(s0, s1)``:
        only the epoch's steps s0 .. s1 - 1 (consecutive slices: the same steps as one pass; the
        shuffle is drawn by the slice that starts at step 0)."""
        end = min(n_rows, rows) if rows > 0 else n_rows
        s0, s1 = steps if steps is not None else (0, -(-end // batch_size))
        if s0 == 0:
            self.order = self.rng.permutation(n_rows) if self.shuffle else None
        for s in range(s0, s1):
            r0 = s * batch_size
            r1 = min(end, r0 + batch_size)
            if r0 >= r1:
                break
            self.step(self.engine.batch(split, r0, r1, self.order), r1 - r0)
            if progress is not None:
                progress(r1 - r0)


class ReferenceTrainer(SlideTrainer):
    """The ``cpu`` variant: SlideTrainer over the NumPy engine."""

    def __init__(self, hp: Hyper, n_features: int, n_labels: int, seed: int, shuffle: bool = False):
        super().__init__(hp, n_features, n_labels, seed, None, shuffle)
