"""The CPU reference and arbiter of model=sparse_dnn (HPEC Sparse DNN Challenge semantics); what it
computes and why: docs/models/sparse_dnn.md, "Exact semantics, the golden set and the check".

``mode="exact"``: every output is ``min(ymax, max(0, fl32(z + b)))`` with ``z`` the exact sum (the
bias only where ``z != 0``), one rounding per output per layer, whatever the order of additions:
float64 sums proven exact by their scale, else an error bound, else rational arithmetic
(:func:`f32_of`; ``stats["fallback"]`` counts those). ``mode="lower"`` / ``"upper"`` propagate the
bounds of any float32-or-better order of additions (nonnegative weights), whose disagreement marks
the rounding-ambiguous rows; ``mode="float32"`` is SciPy's float32 product, for comparison.
Saturation shortcut (exact in every mode): when a layer maps a row of all ``ymax`` to itself, rows
that are all ``ymax`` are carried without being multiplied (on RadiX-Net every survivor saturates
after ~20 layers).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

MODES = ("exact", "lower", "upper", "float32")
U32 = 2.0 ** -24
F32_MAX = float(np.finfo(np.float32).max)


# ------------------------------------------------------------------------------ float32 helpers

def lsb_exponent(v: np.ndarray) -> np.ndarray:
    """For nonzero float32 values: the exponent e of their lowest set bit (each is a multiple of 2^e)."""
    b = np.ascontiguousarray(v, np.float32).view(np.uint32).astype(np.int64)
    ex = (b >> 23) & 0xFF
    mant = (b & 0x7FFFFF) | np.where(ex > 0, 1 << 23, 0)
    low = mant & -mant                                       # lowest set bit (nonzero values)
    tz = np.zeros(low.shape, np.int64)
    nz = low > 0
    tz[nz] = np.frexp(low[nz].astype(np.float64))[1] - 1      # exact for powers of two
    return np.maximum(ex, 1) - 127 - 23 + tz


def f32_of(q: Fraction) -> np.float32:
    """``q`` rounded to the nearest float32, ties to even (subnormals, overflow to inf)."""
    if q == 0:
        return np.float32(0.0)
    neg = q < 0
    n, d = abs(q.numerator), q.denominator
    e = n.bit_length() - d.bit_length()                     # 2^e <= |q| < 2^(e+2)
    if (n << max(0, -e)) < (d << max(0, e)):
        e -= 1                                               # now 2^e <= |q| < 2^(e+1)
    qe = max(e, -126) - 23                                   # the float32 quantum at |q|
    num, den = (n << -qe, d) if qe < 0 else (n, d << qe)
    m, rem = divmod(num, den)
    if 2 * rem > den or (2 * rem == den and m & 1):
        m += 1
    v = float(m) * 2.0 ** qe if qe > -1000 else 0.0
    out = np.float32(np.inf) if v > F32_MAX else np.float32(v)
    return -out if neg else out


def _clip(f: np.ndarray, ymax: np.float32) -> np.ndarray:
    return np.minimum(np.maximum(f, np.float32(0)), ymax)


def _round_dir(t: np.ndarray, up: bool) -> np.ndarray:
    """float64 -> float32 rounded up (``up``) or down."""
    f = t.astype(np.float32)
    g = f.astype(np.float64)
    bad = (g < t) if up else (g > t)
    if bad.any():
        f[bad] = np.nextafter(f[bad], np.float32(np.inf if up else -np.inf))
    return f


# ------------------------------------------------------------------------------ one layer

class LayerW:
    """What the reference needs of one layer, computed once: float64 copies of its positive and
    negative parts, the lowest-bit exponent of its weights, the most entries in a column."""

    def __init__(self, W: sp.csr_matrix):
        W = sp.csr_matrix(W, dtype=np.float32)
        W.sort_indices()
        self.W32 = W
        self.N = W.shape[1]
        d = W.data
        self.nonneg = bool(d.size == 0 or d.min() >= 0)
        if self.nonneg:
            self.Wp = sp.csr_matrix((d.astype(np.float64), W.indices, W.indptr), shape=W.shape)
            self.Wn = None
        else:
            # own copies of the index arrays: eliminate_zeros compacts them in place
            self.Wp = sp.csr_matrix((np.where(d > 0, d, 0).astype(np.float64), W.indices.copy(), W.indptr.copy()),
                                    shape=W.shape)
            self.Wn = sp.csr_matrix((np.where(d < 0, -d, 0).astype(np.float64), W.indices.copy(), W.indptr.copy()),
                                    shape=W.shape)
            self.Wp.eliminate_zeros()
            self.Wn.eliminate_zeros()
        nzd = d[d != 0]
        self.qw = int(lsb_exponent(nzd).min()) if nzd.size else 0
        self.k = int(np.bincount(W.indices, minlength=self.N).max()) if W.nnz else 0
        self._csc = None

    @property
    def csc(self) -> sp.csc_matrix:
        if self._csc is None:
            self._csc = self.W32.tocsc()
            self._csc.sort_indices()
        return self._csc


def _keys(M: sp.csr_matrix) -> np.ndarray:
    """row * ncols + column of every stored entry (sorted for sorted indices)."""
    return np.repeat(np.arange(M.shape[0], dtype=np.int64), np.diff(M.indptr)) * M.shape[1] + M.indices


def _products(Y: sp.csr_matrix, LW: LayerW):
    """(structure of Y W as CSR with float64 z, sum of |products| a) on the same structure."""
    Yd = sp.csr_matrix((Y.data.astype(np.float64), Y.indices, Y.indptr), shape=Y.shape)
    P = (Yd @ LW.Wp).tocsr()                 # activations are >= 0: no cancellation, no dropped zero
    if LW.Wn is None:
        return P, P.data
    P.sort_indices()
    Nn = (Yd @ LW.Wn).tocsr()
    Nn.sort_indices()
    A = (P + Nn).tocsr()                     # union of the two structures (sums of positives)
    A.sort_indices()
    keyA = _keys(A)
    z = np.zeros(A.nnz)
    for M, sign in ((P, 1.0), (Nn, -1.0)):
        z[np.searchsorted(keyA, _keys(M))] += sign * M.data
    Z = sp.csr_matrix((z, A.indices, A.indptr), shape=A.shape)
    return Z, A.data


def _exact_one(Y: sp.csr_matrix, LW: LayerW, r: int, j: int, b: Fraction, ymax: np.float32) -> np.float32:
    """Output (r, j) in rational arithmetic."""
    yi = Y.indices[Y.indptr[r]:Y.indptr[r + 1]]
    yv = Y.data[Y.indptr[r]:Y.indptr[r + 1]]
    C = LW.csc
    wi = C.indices[C.indptr[j]:C.indptr[j + 1]]
    wv = C.data[C.indptr[j]:C.indptr[j + 1]]
    _, a, c = np.intersect1d(yi, wi, assume_unique=True, return_indices=True)
    z = sum((Fraction(float(yv[p])) * Fraction(float(wv[q])) for p, q in zip(a, c)), Fraction(0))
    return np.float32(0.0) if z == 0 else _clip(f32_of(z + b), ymax)


def layer_step(Y: sp.csr_matrix, W, bias: float, ymax: float, mode: str = "exact",
               stats: Optional[Dict[str, int]] = None) -> sp.csr_matrix:
    """One layer in ``mode`` (see the module doc): float32 CSR of the next activations, zeros dropped."""
    b32, y32 = np.float32(bias), np.float32(ymax)
    if mode == "float32":
        Wf = W.W32 if isinstance(W, LayerW) else W
        Z = (Y @ Wf).tocsr()
        Z.eliminate_zeros()
        Z.data += b32
        np.clip(Z.data, 0, y32, out=Z.data)
        Z.eliminate_zeros()
        return Z
    LW = W if isinstance(W, LayerW) else LayerW(W)
    Y = sp.csr_matrix(Y, dtype=np.float32)
    Z, a = _products(Y, LW)
    z = Z.data
    b = float(b32)
    out = np.zeros(z.size, np.float32)
    if mode == "exact":
        row = np.repeat(np.arange(Y.shape[0]), np.diff(Z.indptr))
        qy = np.full(Y.shape[0], 10 ** 6, np.int64)          # rows without entries: no product
        has = np.diff(Y.indptr) > 0
        if has.any():
            lsb = lsb_exponent(Y.data)
            starts = Y.indptr[:-1][has]
            qy[has] = np.minimum.reduceat(lsb, starts) if lsb.size else 0
        q = qy[row] + LW.qw
        exact_z = a < np.ldexp(1.0, np.minimum(53 + q, 1023))
        nz = z != 0
        # exact z: TwoSum(z, b) = s + e exactly, then one correct rounding of s + e
        s = z + b
        bb = s - z
        e = (z - (s - bb)) + (b - bb)
        f = s.astype(np.float32)
        d = s - f.astype(np.float64)
        tie_cand = exact_z & nz & (e != 0) & (d != 0)
        if tie_cand.any():
            idx = np.flatnonzero(tie_cand)
            fi = f[idx]
            g = np.nextafter(fi, np.where(d[idx] > 0, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32))
            tie = 2.0 * d[idx] == g.astype(np.float64) - fi.astype(np.float64)
            push = tie & (np.sign(e[idx]) == np.sign(d[idx]))
            f[idx[push]] = g[push]
        val = np.where(nz, _clip(f, y32), np.float32(0))
        # inexact z: an interval, decided if both ends give the same clipped float32
        loose = ~exact_z
        if loose.any():
            idx = np.flatnonzero(loose)
            kk = LW.k + 2
            E = kk * 2.0 ** -52 * (a[idx] + abs(b))
            Ez = kk * 2.0 ** -52 * a[idx]
            lo = _clip((z[idx] + b - E).astype(np.float32), y32)
            hi = _clip((z[idx] + b + E).astype(np.float32), y32)
            certain = (lo == hi) & (np.abs(z[idx]) > Ez)
            val[idx[certain]] = lo[certain]
            slow = idx[~certain]
            if stats is not None:
                stats["fallback"] = stats.get("fallback", 0) + int(slow.size)
            bq = Fraction(b)
            for t in slow:
                val[t] = _exact_one(Y, LW, int(row[t]), int(Z.indices[t]), bq, y32)
        out = val
    elif mode in ("lower", "upper"):
        if not LW.nonneg:
            raise ValueError("rounding-ambiguity bounds need nonnegative weights")
        g = (LW.k + 2) * U32 / (1 - (LW.k + 2) * U32) + LW.k * 2.0 ** -52 + 2.0 ** -50
        eps = (LW.k + 1) * 2.0 ** -50                        # fixed-point accumulators (quantum <= 2^-50)
        if mode == "upper":
            t = z * (1 + g) + eps + b
            t = t + np.abs(t) * 2.0 ** -50 + 2.0 ** -1074
            out = _clip(_round_dir(t, up=True), y32)
        else:
            zl = z * (1 - g) - eps
            t = zl + b
            t = t - np.abs(t) * 2.0 ** -50 - 2.0 ** -1074
            out = _clip(_round_dir(t, up=False), y32)
            out[zl <= 2.0 ** -100] = 0                       # a sum that may come out 0 gets no bias
    else:
        raise ValueError(f"mode={mode!r}: one of {MODES}")
    R = sp.csr_matrix((out, Z.indices, Z.indptr), shape=Z.shape)
    R.eliminate_zeros()
    return R


def keeps_saturation(W, bias: float, ymax: float, mode: str = "exact") -> bool:
    """Whether the layer maps a row of all ``ymax`` to a row of all ``ymax`` (in ``mode``)."""
    N = W.N if isinstance(W, LayerW) else W.shape[0]
    row = sp.csr_matrix(np.full((1, N), np.float32(ymax), np.float32))
    out = layer_step(row, W, bias, ymax, mode)
    return bool(out.nnz == out.shape[1] and np.all(out.data == np.float32(ymax)))


# ------------------------------------------------------------------------------ many layers

class _Rows:
    """One block of rows on its way through the layers in one mode: the CSR of its live rows
    (``active``: their ids in the block) and the ids of the rows carried as saturated."""

    def __init__(self, Y0: sp.csr_matrix, mode: str):
        self.N = Y0.shape[1]
        self.mode = mode
        self.Y = sp.csr_matrix(Y0, dtype=np.float32)
        self.Y.eliminate_zeros()
        self.active = np.arange(Y0.shape[0])
        self.saturated = np.zeros(0, np.int64)
        self.stats: Dict[str, int] = {}

    @property
    def count(self) -> int:
        return int(self.active.size + self.saturated.size)

    def busy(self, keep: bool) -> bool:
        """Whether the layer has anything to do here (``keep``: the layer keeps saturation)."""
        return bool(self.active.size) or bool(self.saturated.size and not keep)

    def step(self, W, keep: bool, bias: float, ymax: float, shortcut: bool) -> int:
        N = self.N
        if self.saturated.size and not keep:
            full = sp.csr_matrix(np.full((self.saturated.size, N), ymax, np.float32))
            self.Y = sp.vstack([self.Y, full], format="csr")
            self.active = np.r_[self.active, self.saturated]
            self.saturated = np.zeros(0, np.int64)
        Y = layer_step(self.Y, W, bias, ymax, self.mode, self.stats)
        nnz_row = np.diff(Y.indptr)
        live = nnz_row > 0
        if shortcut:
            sat = live & (nnz_row == N)
            if sat.any():
                sat[sat] = np.asarray((Y[sat] == np.float32(ymax)).sum(axis=1)).ravel() == N
                live &= ~sat
                self.saturated = np.r_[self.saturated, self.active[sat]]
        if not live.all():
            Y = Y[live]
            self.active = self.active[live]
        self.Y = Y
        return self.count

    def categories(self) -> np.ndarray:
        return np.union1d(self.active, self.saturated).astype(np.int64)   # every kept row has a positive sum


@dataclass
class Golden:
    """What the reference says about a network: the exact categories and nonzero rows per layer,
    the rounding-ambiguous rows (None: not computed, e.g. negative weights), the exact outputs
    that needed rational arithmetic, and the float32-bound categories (lower / upper)."""
    categories: np.ndarray
    rows: np.ndarray
    ambiguous: Optional[np.ndarray] = None
    fallback: int = 0
    lower: Optional[np.ndarray] = None
    upper: Optional[np.ndarray] = None


def _propagate(Y0: sp.csr_matrix, layers: Sequence, bias: float, ymax: float, shortcut: bool, modes: Sequence[str],
               workers: int, progress) -> Dict[str, Tuple[Optional[np.ndarray], np.ndarray, int]]:
    """Every mode over row blocks, layer by layer: each layer is fetched once (a lazy RadiX-Net
    generates it on the threads, a window ahead, with its float64 copies and each mode's
    saturation check) and applied to every block that still has live rows. Rows are independent,
    so the blocks give the same answer as one block. Returns mode -> (categories or None when the
    mode does not apply, nonzero rows per layer, outputs recomputed in rational arithmetic)."""
    import os
    from concurrent.futures import ThreadPoolExecutor
    from pipeline.data.radixnet import layer_imap
    n = Y0.shape[0]
    workers = workers or min(16, os.cpu_count() or 1)
    chunks = max(1, min(4 * workers, n // 256))
    bounds = np.linspace(0, n, chunks + 1).astype(np.int64)
    Y0 = sp.csr_matrix(Y0, dtype=np.float32)
    blocks = {m: [_Rows(Y0[b0:b1], m) for b0, b1 in zip(bounds[:-1], bounds[1:])] for m in modes}
    rows = {m: np.zeros(len(layers), np.int64) for m in modes}
    dropped: Dict[str, bool] = {m: False for m in modes}

    def prep(l, W):
        LW = LayerW(W)          # keep[m]: None where the mode does not apply (bounds need nonnegative weights)
        keep = {m: None if m in ("lower", "upper") and not LW.nonneg
                else bool(shortcut) and keeps_saturation(LW, bias, ymax, m) for m in modes}
        return LW, keep

    fetch = layer_imap(layers, prep, workers, progress, "reference")
    ex = ThreadPoolExecutor(workers) if workers > 1 and chunks > 1 else None
    try:
        for l, (LW, keep) in enumerate(fetch):
            work = []
            for m in modes:
                if dropped[m]:
                    continue
                if keep[m] is None:
                    dropped[m] = True                  # bounds need nonnegative weights
                    continue
                work += [(b, keep[m]) for b in blocks[m] if b.busy(keep[m])]
            if work:
                step = lambda bk: bk[0].step(LW, bk[1], bias, ymax, shortcut)   # noqa: E731
                list(ex.map(step, work)) if ex else [step(w) for w in work]
            alive = 0
            for m in modes:
                rows[m][l] = sum(b.count for b in blocks[m])
                alive += 0 if dropped[m] else rows[m][l]
            if alive == 0:
                break                                  # every row is dead in every mode: zeros from here on
    finally:
        close = getattr(fetch, "close", None)
        if close:
            close()
        if ex:
            ex.shutdown(wait=True)
    out = {}
    for m in modes:
        cats = np.concatenate([b.categories() + b0 for b, b0 in zip(blocks[m], bounds[:-1])]).astype(np.int64)
        out[m] = (None if dropped[m] else cats, rows[m], sum(b.stats.get("fallback", 0) for b in blocks[m]))
    return out


def infer_parallel(Y0: sp.csr_matrix, layers: List[sp.csr_matrix], bias: float, ymax: float,
                   shortcut: bool = True, workers: int = 0, progress=None,
                   mode: str = "exact") -> Tuple[np.ndarray, np.ndarray]:
    """(categories 0-based, nonzero rows after each layer) in ``mode`` (default: exact), over row
    blocks in ``workers`` threads (0: up to 16; SciPy's sparse products release the GIL). The same
    answer for any ``workers``."""
    cats, rows, _ = _propagate(Y0, layers, bias, ymax, shortcut, (mode,), workers, progress)[mode]
    if cats is None:
        raise ValueError(f"mode={mode} needs nonnegative weights")
    return cats, rows


def infer(Y0: sp.csr_matrix, layers: List[sp.csr_matrix], bias: float, ymax: float,
          shortcut: bool = True, progress=None, mode: str = "exact") -> Tuple[np.ndarray, np.ndarray]:
    """:func:`infer_parallel` in one thread."""
    return infer_parallel(Y0, layers, bias, ymax, shortcut, 1, progress, mode)


def golden(Y0: sp.csr_matrix, layers, bias: float, ymax: float, shortcut: bool = True, workers: int = 0,
           progress=None, bounds: bool = True) -> Golden:
    """The exact categories (the golden set) and, with ``bounds``, the rounding-ambiguous rows: one
    pass over the layers for the three modes."""
    modes = ("exact", "lower", "upper") if bounds else ("exact",)
    res = _propagate(Y0, layers, bias, ymax, shortcut, modes, workers, progress)
    cats, rows, fb = res["exact"]
    g = Golden(cats, rows, fallback=fb)
    if bounds and res["lower"][0] is not None and res["upper"][0] is not None:
        g.lower, g.upper = res["lower"][0], res["upper"][0]
        g.ambiguous = np.setdiff1d(g.upper, g.lower).astype(np.int64)
        if not (np.all(np.isin(g.lower, cats)) and np.all(np.isin(cats, g.upper))):
            raise AssertionError("reference: the exact categories are not between the float32 bounds")
    return g


def arbitrate(Y0: sp.csr_matrix, layers, bias: float, ymax: float, rows: Sequence[int],
              workers: int = 0) -> Dict[int, bool]:
    """The exact answer for the given rows only (rows are independent): row -> is a category."""
    rows = np.asarray(sorted(set(int(r) for r in rows)), np.int64)
    if rows.size == 0:
        return {}
    cats, _ = infer_parallel(Y0[rows], layers, bias, ymax, True, workers)
    live = set(rows[cats].tolist())
    return {int(r): (int(r) in live) for r in rows}


def check_categories(got: np.ndarray, golden: np.ndarray,
                     ambiguous: Optional[np.ndarray] = None) -> Tuple[bool, str, np.ndarray]:
    """The challenge check: ``got`` equals ``golden`` on every row outside ``ambiguous``.
    Returns (ok, message about the rows outside it, the differing rows inside it)."""
    got = np.asarray(got, np.int64)
    golden = np.asarray(golden, np.int64)
    diff = np.setxor1d(got, golden)
    amb = np.zeros(0, np.int64) if ambiguous is None else np.asarray(ambiguous, np.int64)
    inside = np.intersect1d(diff, amb)
    outside = np.setdiff1d(diff, amb)
    if outside.size == 0:
        return True, "", inside
    extra = np.intersect1d(outside, got)
    missing = np.intersect1d(outside, golden)
    where = " outside the rounding-ambiguous rows" if amb.size else ""
    return False, (f"{got.size} categories vs {golden.size} golden: {extra.size} extra (first "
                   f"{extra[:5].tolist()}), {missing.size} missing (first {missing[:5].tolist()}){where}"), inside


def categories_equal(got: np.ndarray, golden: np.ndarray) -> Tuple[bool, str]:
    return check_categories(got, golden)[:2]
