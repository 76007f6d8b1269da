"""The CPU reference (challenge semantics, SciPy sparse, float32).

Per layer: ``Z = Y @ W``; the bias is added to the stored nonzeros of Z only (MATLAB reference:
``Y = Z + logical(Z) .* b``); ReLU clipped to [0, ymax]; zeros dropped. Categories are the rows of
the final Y with a nonzero sum (0-based here; the official files are 1-based).

Saturation shortcut (exact, optional): if a row is entirely ``ymax`` and every column of W holds
only non-negative weights with ``ymax * colsum + bias >= ymax`` (checked per layer, in float32 as
the product is computed), the row's next output is again entirely ``ymax``. Such rows are carried
without being multiplied. On RadiX-Net every survivor saturates after ~20 layers, so this turns
the deep part of the network into bookkeeping.
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np
import scipy.sparse as sp


def layer_step(Y: sp.csr_matrix, W: sp.csr_matrix, bias: float, ymax: float) -> sp.csr_matrix:
    Z = (Y @ W).tocsr()
    Z.eliminate_zeros()
    Z.data += np.float32(bias)
    np.clip(Z.data, 0, np.float32(ymax), out=Z.data)
    Z.eliminate_zeros()
    return Z


def _keeps_saturation(W: sp.csr_matrix, bias: float, ymax: float) -> bool:
    """Whether a row of all ``ymax`` stays all ``ymax`` through W (exact, see the module doc)."""
    if W.nnz and W.data.min() < 0:
        return False
    col = np.asarray(W.sum(axis=0), dtype=np.float32).ravel()
    z = np.float32(ymax) * col
    return bool(np.all(z > 0) and np.all(z + np.float32(bias) >= np.float32(ymax)))


class _Rows:
    """One block of rows on its way through the layers: the CSR of its live rows (``active``: their
    ids in the block) and the ids of the rows carried as saturated. :meth:`step` is one layer."""

    def __init__(self, Y0: sp.csr_matrix):
        self.N = Y0.shape[1]
        self.Y = sp.csr_matrix(Y0, dtype=np.float32)
        self.active = np.arange(Y0.shape[0])
        self.saturated = np.zeros(0, np.int64)

    @property
    def count(self) -> int:
        return int(self.active.size + self.saturated.size)

    def busy(self, keeps) -> bool:
        """Whether the layer has anything to do here (``keeps``: the layer keeps saturation)."""
        return bool(self.active.size) or bool(self.saturated.size and not keeps())

    def step(self, W: sp.csr_matrix, keeps, bias: float, ymax: float, shortcut: bool) -> int:
        N = self.N
        if self.saturated.size and not keeps():
            full = sp.csr_matrix(np.full((self.saturated.size, N), ymax, np.float32))
            self.Y = sp.vstack([self.Y, full], format="csr")
            self.active = np.r_[self.active, self.saturated]
            self.saturated = np.zeros(0, np.int64)
        Y = layer_step(self.Y, W, bias, ymax)
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


def infer(Y0: sp.csr_matrix, layers: List[sp.csr_matrix], bias: float, ymax: float,
          shortcut: bool = True, progress=None) -> Tuple[np.ndarray, np.ndarray]:
    """(categories 0-based, nonzero rows after each layer)."""
    st = _Rows(Y0)
    rows = np.zeros(len(layers), np.int64)
    it = progress(range(len(layers)), desc="reference") if progress else range(len(layers))
    for l in it:
        W = layers[l]
        rows[l] = st.step(W, lambda: _keeps_saturation(W, bias, ymax), bias, ymax, shortcut)
    return st.categories(), rows


def infer_parallel(Y0: sp.csr_matrix, layers: List[sp.csr_matrix], bias: float, ymax: float,
                   shortcut: bool = True, workers: int = 0, progress=None) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`infer` over row blocks in threads (rows are independent; SciPy's sparse products
    release the GIL), layer by layer: each layer is fetched once (a lazy RadiX-Net generates it on
    the same threads, a window ahead) and applied to every block that still has live rows, so the
    deep part of a network, where every survivor is carried as saturated, costs one generation and
    one column-sum check per layer. Once no row is live or saturated the rest is zeros. Same
    answer as :func:`infer`."""
    import os
    from concurrent.futures import ThreadPoolExecutor
    from pipeline.data.radixnet import layer_imap
    n = Y0.shape[0]
    workers = workers or min(16, os.cpu_count() or 1)
    chunks = max(1, min(4 * workers, n // 256))
    if workers == 1 or chunks == 1:
        return infer(Y0, layers, bias, ymax, shortcut, progress)
    bounds = np.linspace(0, n, chunks + 1).astype(np.int64)
    blocks = [_Rows(Y0[b0:b1]) for b0, b1 in zip(bounds[:-1], bounds[1:])]
    rows = np.zeros(len(layers), np.int64)
    # each layer comes with its saturation check (computed on the generating threads when needed)
    fetch = layer_imap(layers, lambda l, W: (W, _keeps_saturation(W, bias, ymax) if shortcut else True),
                       workers, progress, "reference")
    with ThreadPoolExecutor(workers) as ex:
        try:
            for l, (W, keep) in enumerate(fetch):
                keeps = (lambda k=keep: k)
                busy = [b for b in blocks if b.busy(keeps)]
                if busy:
                    list(ex.map(lambda b: b.step(W, keeps, bias, ymax, shortcut), busy))
                rows[l] = sum(b.count for b in blocks)
                if rows[l] == 0:
                    break                                   # every row is dead: zeros from here on
        finally:
            close = getattr(fetch, "close", None)
            if close:
                close()
    cats = np.concatenate([b.categories() + b0 for b, b0 in zip(blocks, bounds[:-1])])
    return cats.astype(np.int64), rows


def categories_equal(got: np.ndarray, golden: np.ndarray) -> Tuple[bool, str]:
    got = np.asarray(got, np.int64)
    golden = np.asarray(golden, np.int64)
    if got.shape == golden.shape and np.array_equal(got, golden):
        return True, ""
    extra = np.setdiff1d(got, golden)
    missing = np.setdiff1d(golden, got)
    return False, (f"{got.size} categories vs {golden.size} golden: {extra.size} extra "
                   f"(first {extra[:5].tolist()}), {missing.size} missing (first {missing[:5].tolist()})")
