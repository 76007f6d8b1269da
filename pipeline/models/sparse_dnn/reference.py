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
    if W.nnz and W.data.min() < 0:
        return False
    col = np.asarray(W.sum(axis=0), dtype=np.float32).ravel()
    z = np.float32(ymax) * col
    return bool(np.all(z > 0) and np.all(z + np.float32(bias) >= np.float32(ymax)))


def infer(Y0: sp.csr_matrix, layers: List[sp.csr_matrix], bias: float, ymax: float,
          shortcut: bool = True, progress=None) -> Tuple[np.ndarray, np.ndarray]:
    """(categories 0-based, nonzero rows after each layer)."""
    n, N = Y0.shape
    Y = sp.csr_matrix(Y0, dtype=np.float32)
    saturated = np.zeros(0, np.int64)             # row ids carried as all-ymax
    active = np.arange(n)                         # row ids of Y's rows
    rows = np.zeros(len(layers), np.int64)
    it = progress(range(len(layers)), desc="reference") if progress else range(len(layers))
    for l in it:
        W = layers[l]
        if saturated.size and not _keeps_saturation(W, bias, ymax):
            full = sp.csr_matrix(np.full((saturated.size, N), ymax, np.float32))
            Y = sp.vstack([Y, full], format="csr")
            active = np.r_[active, saturated]
            saturated = np.zeros(0, np.int64)
        Y = layer_step(Y, W, bias, ymax)
        nnz_row = np.diff(Y.indptr)
        live = nnz_row > 0
        if shortcut:
            sat = live & (nnz_row == N)
            if sat.any():
                sat[sat] = np.asarray((Y[sat] == np.float32(ymax)).sum(axis=1)).ravel() == N
                live &= ~sat
                saturated = np.r_[saturated, active[sat]]
        if not live.all():
            Y = Y[live]
            active = active[live]
        rows[l] = active.size + saturated.size
    cats = np.union1d(active, saturated).astype(np.int64)    # every kept row has a positive sum
    return cats, rows


def infer_parallel(Y0: sp.csr_matrix, layers: List[sp.csr_matrix], bias: float, ymax: float,
                   shortcut: bool = True, workers: int = 0, progress=None) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`infer` over row chunks in threads (rows are independent; SciPy's sparse products
    release the GIL). Same answer as :func:`infer`."""
    import os
    from concurrent.futures import ThreadPoolExecutor
    n = Y0.shape[0]
    workers = workers or min(16, os.cpu_count() or 1)
    chunks = max(1, min(4 * workers, n // 256))
    if workers == 1 or chunks == 1:
        return infer(Y0, layers, bias, ymax, shortcut, progress)
    bounds = np.linspace(0, n, chunks + 1).astype(np.int64)
    jobs = list(zip(bounds[:-1], bounds[1:]))
    with ThreadPoolExecutor(workers) as ex:
        futs = [ex.submit(infer, Y0[b0:b1], layers, bias, ymax, shortcut) for b0, b1 in jobs]
        it = progress(futs, desc="reference") if progress else futs
        parts = [f.result() for f in it]
    cats = np.concatenate([c + b0 for (c, _), (b0, _) in zip(parts, jobs)])
    rows = np.sum([r for _, r in parts], axis=0)
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
