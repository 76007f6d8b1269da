"""Seeded generator of CTR-like sparse data at the shapes of the cuWide paper (Table 2).

Feature popularity follows a power law (p_j ~ 1/(rank+1)^alpha, ranks randomly permuted over ids so
that renumbering by frequency has work to do); each row draws about ``nnz`` distinct features with
value 1. Labels come from a planted model: logit = b* + x.w* (+ pairwise FM term with planted
factors), y ~ Bernoulli(sigmoid(logit)), so that log loss and AUC mean something.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import scipy.sparse as sp

# rows, features, nonzeros per row (paper Table 2; nnz = density x features)
SHAPES: Dict[str, Tuple[int, int, int]] = {
    "criteo_s": (5_134_149, 1_000_000, 40),
    "kddb": (19_264_097, 29_890_095, 30),
    "url": (2_396_130, 3_231_961, 129),
    "kdd12": (149_639_105, 54_686_452, 11),
}


def generate(rows: int, features: int, nnz: int, seed: int, alpha: float = 1.1,
             planted_k: int = 4, base_ctr: float = 0.25,
             draw_factor: float = 1.25) -> Tuple[sp.csr_matrix, np.ndarray]:
    rng = np.random.default_rng(seed)
    rank = np.arange(1, features + 1, dtype=np.float64)
    p = rank ** -alpha
    p /= p.sum()
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    perm = rng.permutation(features).astype(np.int32)          # rank -> feature id
    # draw a few more than nnz: duplicates of the hottest features are merged afterwards
    counts = np.clip(rng.poisson(max(nnz * draw_factor - 1, 0), rows) + 1, 1, None).astype(np.int64)
    total = int(counts.sum())
    cols = perm[np.searchsorted(cdf, rng.random(total, dtype=np.float64), side="right").clip(0, features - 1)]
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    X = sp.csr_matrix((np.ones(total, np.float32), cols, indptr), shape=(rows, features))
    X.sum_duplicates()
    X.data[:] = 1.0
    # planted model: rarer features carry larger weights (as in CTR data), scaled to a sane logit range
    w_star = (rng.standard_normal(features) * 0.6).astype(np.float32)
    z = X @ w_star
    if planted_k:
        V = (rng.standard_normal((features, planted_k)) * 0.15).astype(np.float32)
        XV = np.asarray(X @ V)
        z = z + 0.5 * ((XV ** 2).sum(1) - np.asarray(X @ (V ** 2)).sum(1))
    z = (z - z.mean()) / max(float(z.std()), 1e-6) * 1.5
    b = np.log(base_ctr / (1 - base_ctr))
    y = (rng.random(rows) < 1 / (1 + np.exp(-(z + b)))).astype(np.float32)
    return X.astype(np.float32), y
