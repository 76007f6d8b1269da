"""NumPy/SciPy references and input generators for the N-hot lookup and the fused softmax + top-N.

Ordering rule shared with every kernel (``cuda/argueta/topn.cu``):

* a float32 maps to an order-preserving uint32 key (:func:`ordered_u32`): negative values to
  ``~bits``, the rest to ``bits | 0x80000000``; every NaN to ``0xFFFFFFFF`` (NaN ranks above +inf);
  ``-0.0`` ranks just below ``+0.0``;
* ties go to the smaller column index: the packed 64-bit key is
  ``ordered_u32(x) << 32 | (0xFFFFFFFF - index)`` (:func:`pack_keys`), unique per row;
* probabilities are the float64 softmax ``exp(x - max) / sum(exp(x - max))``; a row holding a NaN
  or +inf, or only -inf, has NaN probabilities (float64 NumPy gives the same); its indices are still
  ranked by the keys above.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import scipy.sparse as sp

# ----------------------------------------------------------------------------- N-hot lookup


def make_fewhot(L: int, K: int, M: int, N: int, rng: np.random.Generator):
    """A: L x K CSR with exactly N distinct random columns per row (sorted) and non-unit values of
    both signs in +-[0.5, 2); B: K x M standard normal. float32, int32 indices."""
    N = min(N, K)
    cols = np.argsort(rng.random((L, K)), axis=1)[:, :N] if K <= 4096 else \
        np.stack([rng.choice(K, N, replace=False) for _ in range(L)])
    cols = np.sort(cols, axis=1).astype(np.int32)
    vals = (rng.uniform(0.5, 2.0, (L, N)) * rng.choice([-1.0, 1.0], (L, N))).astype(np.float32)
    indptr = (np.arange(L + 1) * N).astype(np.int32)
    B = rng.standard_normal((K, M), dtype=np.float32)
    return sp.csr_matrix((vals.ravel(), cols.ravel(), indptr), shape=(L, K)), B


def fewhot_reference(A: sp.csr_matrix, B: np.ndarray) -> np.ndarray:
    """C = A B in float64."""
    return np.asarray(A.astype(np.float64) @ B.astype(np.float64))


def fewhot_gather(A: sp.csr_matrix, B: np.ndarray) -> np.ndarray:
    """The paper's algorithm in NumPy, float32: each output row is the weighted sum of the B rows its
    non-zeros point at (np.add.reduceat over the gathered rows)."""
    L, M = A.shape[0], B.shape[1]
    out = np.zeros((L, M), np.float32)
    nz = np.diff(A.indptr) > 0
    if A.nnz:
        rows = A.data[:, None] * B[A.indices]
        out[nz] = np.add.reduceat(rows, A.indptr[:-1][nz], axis=0)
    return out


# ----------------------------------------------------------------------------- softmax + top-N


def ordered_u32(x: np.ndarray) -> np.ndarray:
    """Order-preserving map float32 -> uint32 (NaN -> 0xFFFFFFFF, above +inf)."""
    x = np.asarray(x, np.float32)
    b = x.view(np.uint32)
    u = np.where(b & np.uint32(0x80000000), ~b, b | np.uint32(0x80000000)).astype(np.uint32)
    return np.where(np.isnan(x), np.uint32(0xFFFFFFFF), u).astype(np.uint32)


def key_float(u: np.ndarray) -> np.ndarray:
    """Inverse of :func:`ordered_u32` (NaN keys give a NaN)."""
    u = np.asarray(u, np.uint32)
    b = np.where(u & np.uint32(0x80000000), u & np.uint32(0x7FFFFFFF), ~u).astype(np.uint32)
    return b.view(np.float32)


def pack_keys(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """64-bit keys (ordered value << 32 | (0xFFFFFFFF - index)): larger key = ranks first."""
    hi = ordered_u32(x).astype(np.uint64) << np.uint64(32)
    return hi | (np.uint64(0xFFFFFFFF) - np.asarray(idx, np.uint64))


def unpack_keys(k: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    k = np.asarray(k, np.uint64)
    x = key_float((k >> np.uint64(32)).astype(np.uint32))
    idx = (np.uint64(0xFFFFFFFF) - (k & np.uint64(0xFFFFFFFF))).astype(np.int64)
    return x, idx


def softmax_stats(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per-row max and sum of exp(x - max) in float64 (NaN where the softmax is undefined)."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=1)
        d = np.sum(np.exp(x - m[:, None]), axis=1)
    return m, d


def _largest_keys(x: np.ndarray, n: int):
    """(column positions, packed keys) of the n largest packed keys of each row of x, unordered."""
    L, K = x.shape
    keys = pack_keys(x, np.broadcast_to(np.arange(K), (L, K)))
    part = np.argpartition(keys, K - n, axis=1)[:, K - n:] if n < K else np.broadcast_to(np.arange(K), (L, K))
    return part, np.take_along_axis(keys, part, axis=1)


def topn_reference(x: np.ndarray, n: int) -> Dict[str, np.ndarray]:
    """Expected top-n probabilities (float64, descending) and indices (int64) of each row, with the
    ordering rule of the module docstring; also the per-row statistics for tie-tolerant checks."""
    x = np.asarray(x, np.float32)
    part, sel = _largest_keys(x, n)
    order = np.argsort(sel, axis=1)[:, ::-1]
    idx = np.take_along_axis(part, order, axis=1).astype(np.int64)
    m, d = softmax_stats(x)
    xs = np.take_along_axis(x, idx, axis=1).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        probs = np.exp(xs - m[:, None]) / d[:, None]
    return {"probs": probs, "idx": idx, "m": m, "d": d, "x": x}


def topn_sort(x: np.ndarray, n: int) -> Dict[str, np.ndarray]:
    """Two-pass CPU baseline: float32 softmax, then a full stable sort of each row."""
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
    idx = np.argsort(-p, axis=1, kind="stable")[:, :n]
    return {"probs": np.take_along_axis(p, idx, axis=1), "idx": idx}


def topn_cpu(x: np.ndarray, n: int) -> Dict[str, np.ndarray]:
    """CPU version of the fused design: select on the packed keys (argpartition), sort only the n
    winners, exponentiate only them."""
    x = np.asarray(x, np.float32)
    _, sel = _largest_keys(x, n)
    sel = np.sort(sel, axis=1)[:, ::-1]
    xs, idx = unpack_keys(sel)
    with np.errstate(invalid="ignore", over="ignore"):
        m = x.max(axis=1, keepdims=True)
        d = np.exp(x - m).sum(axis=1, keepdims=True, dtype=np.float32)
        probs = np.exp(xs - m) / d
    return {"probs": probs.astype(np.float32), "idx": idx}


def make_logits(L: int, K: int, rng: np.random.Generator, ties: bool = True, neg_inf: bool = True) -> np.ndarray:
    """Logits with negative values (N(-1, 3^2)), repeated values (a tenth rounded to quarters, so
    ties are common) and a few -inf (masked entries), float32."""
    x = (rng.standard_normal((L, K)) * 3.0 - 1.0).astype(np.float32)
    if ties:
        t = rng.random((L, K)) < 0.1
        x[t] = np.round(x[t] * 4.0) / 4.0
        x[:, :: max(1, K // 7)] = x[:, :1]            # exact repeats of each row's first value
    if neg_inf:
        x[rng.random((L, K)) < 0.01] = -np.inf
    return x


def to_numpy(a) -> np.ndarray:
    """NumPy copy of a NumPy, CuPy or PyTorch array."""
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "detach"):                     # torch.Tensor
        return a.detach().cpu().numpy()
    from pipeline.gpu.transfer import to_host
    return to_host(a)


def check_topn(out: Dict[str, np.ndarray], exp: Dict[str, np.ndarray], exact: bool = True) -> Dict[str, float]:
    """Errors of a top-n result: ``prob`` is the largest absolute probability error (float64
    reference); ``index`` counts index disagreements. exact=True: the indices must equal the
    reference's (tie rule included). exact=False (baselines with another tie rule): the indices
    must be distinct and their reference probabilities must equal the reference's top-n (so the
    index set equals NumPy's up to ties)."""
    p = np.asarray(to_numpy(out["probs"]), np.float64)
    i = np.asarray(to_numpy(out["idx"]), np.int64)
    rp, ri = exp["probs"], exp["idx"]
    if p.shape != rp.shape or i.shape != ri.shape:
        return {"prob": float("inf"), "index": float("inf")}
    ok = np.isfinite(rp)
    both_nan = np.isnan(p) & np.isnan(rp)
    perr = np.where(both_nan, 0.0, np.abs(p - rp))
    prob_err = float(np.max(np.where(np.isnan(perr), np.inf, perr))) if perr.size else 0.0
    if exact:
        bad = int(np.count_nonzero(i != ri))
    else:
        K = exp["x"].shape[1]
        inrange = (i >= 0) & (i < K)
        bad = int(np.count_nonzero(~inrange))
        ic = np.clip(i, 0, K - 1)
        xs = np.take_along_axis(exp["x"], ic, axis=1).astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            pr = np.exp(xs - exp["m"][:, None]) / exp["d"][:, None]
        diff = np.abs(np.sort(pr, axis=1)[:, ::-1] - rp)
        bad += int(np.count_nonzero((diff > 1e-6) & ok))
        bad += sum(len(np.unique(r)) != len(r) for r in i)
    return {"prob": prob_err, "index": float(bad)}
