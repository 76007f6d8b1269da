"""Seeded extreme-classification data at the shapes of Amazon-670K and Wiki-325K.

What the generator plants (all draws from ``numpy.random.Generator(PCG64)``, seeded):

- **Labels**: power-law (Zipf-like) frequencies: rank ``floor(x) - 1`` with ``x`` drawn from the
  density ``~ x^-zipf`` on ``[1, L + 1)`` (inverse-CDF sampling, no table), ranks randomly
  permuted over label ids. A row has ``1 + Poisson(labels_per_row' - 1)`` distinct labels
  (``labels_per_row'`` corrects for the rows without labels), except a fraction ``empty_rows`` of
  rows with none (as real XMLRepo files have a few).
- **Features**: each label owns ``prototypes`` feature ids (uniform). A row draws about
  ``nnz_per_row`` distinct features (over-dispersed: Poisson of a Gamma), a fraction ``signal`` of
  them from the prototypes of its labels and the rest from a Zipf(``feature_zipf``) background
  over all features, so labels are learnable from features and frequent features carry little
  information (as words do).
- **Values**: tf-idf-like: ``(1 + ln tf) * idf(f)`` (tf: how often the row drew f; idf grows with
  the background rarity of f), each row normalised to unit L2 norm; all positive.

Rows are generated in blocks of ``BLOCK_ROWS``, each from its own stream ``(seed, split, block)``,
so a fraction of the rows (``scale``) is exactly a prefix of the whole set and memory stays
bounded. The full Amazon-670K shape takes about 10 s of one core (~0.8 GB peak) and is cached
under ``cache_dir``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import scipy.sparse as sp

from pipeline.data.cache import cached_arrays
from pipeline.data.xc import XCData, XCSplit, split_arrays, split_from_arrays

BLOCK_ROWS = 4096
TOPUP_ROUNDS = 10         # re-draws that replace duplicate labels / features
CACHE_VERSION = 1

# Published statistics of the real sets (XMLRepo): features, labels, train rows, test rows,
# average nonzeros and labels per train row.
SHAPES: Dict[str, Dict[str, float]] = {
    "amazon670k": {"features": 135_909, "labels": 670_091, "train_rows": 490_449, "test_rows": 153_025,
                   "nnz_per_row": 75.68, "labels_per_row": 5.45},
    "wiki325k": {"features": 1_617_899, "labels": 325_056, "train_rows": 1_778_351, "test_rows": 587_084,
                 "nnz_per_row": 42.5, "labels_per_row": 3.2},
}


@dataclass(frozen=True)
class Spec:
    features: int
    labels: int
    train_rows: int
    test_rows: int
    nnz_per_row: float = 76.0
    labels_per_row: float = 5.45
    zipf: float = 0.6             # label-frequency exponent
    feature_zipf: float = 1.0     # background feature-frequency exponent
    prototypes: int = 12          # feature ids owned by each label
    signal: float = 0.5           # fraction of a labelled row's features drawn from its labels' prototypes
    empty_rows: float = 0.002     # fraction of rows without labels
    dispersion: float = 4.0       # Gamma shape of the per-row feature count (larger: closer to Poisson)

    def describe(self) -> str:
        return (f"{self.train_rows}+{self.test_rows} rows, {self.features} features, {self.labels} labels, "
                f"~{self.nnz_per_row:g} nnz and ~{self.labels_per_row:g} labels a row, zipf {self.zipf:g}")


def power_law_ranks(rng, n_draws: int, n: int, a: float) -> np.ndarray:
    """``n_draws`` ranks in [0, n) from the power law ``density(x) ~ x^-a`` on [1, n + 1), rank =
    floor(x) - 1 (inverse-CDF sampling: O(1) a draw, no table)."""
    u = rng.random(n_draws)
    top = float(n + 1)
    if abs(a - 1.0) < 1e-9:
        x = np.exp(u * np.log(top))
    else:
        b = 1.0 - a
        x = (1.0 + u * (top ** b - 1.0)) ** (1.0 / b)
    return np.minimum(x.astype(np.int64) - 1, n - 1)


class _Structure:
    """The planted model shared by train and test: label popularity, prototypes, feature popularity."""

    def __init__(self, spec: Spec, seed: int):
        rng = np.random.default_rng([int(seed), 0])
        self.spec = spec
        F, L = spec.features, spec.labels
        self.label_of_rank = rng.permutation(L).astype(np.int32)
        self.protos = rng.integers(0, F, size=(L, spec.prototypes), dtype=np.int32)
        self.feat_of_rank = rng.permutation(F).astype(np.int32)
        rank_of_feat = np.empty(F, np.int64)
        rank_of_feat[self.feat_of_rank] = np.arange(F)
        # idf: ln(1 / p_background(f)) relative to the most frequent feature, plus one
        self.idf = (1.0 + spec.feature_zipf * np.log1p(rank_of_feat)).astype(np.float32)

    def labels(self, rng, n: int) -> np.ndarray:
        return self.label_of_rank[power_law_ranks(rng, n, self.spec.labels, self.spec.zipf)]

    def noise(self, rng, n: int) -> np.ndarray:
        return self.feat_of_rank[power_law_ranks(rng, n, self.spec.features, self.spec.feature_zipf)]


def _distinct(want: np.ndarray, draw: Callable[[np.ndarray], np.ndarray], width: int,
              first: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys ``row * width + id`` with their multiplicity: ``want[r]`` distinct ids a
    row where possible. ``first``: (rows, ids) drawn already; ``draw(rows)`` draws one id for each
    entry of ``rows``; rows short of distinct ids draw again (TOPUP_ROUNDS times; a re-draw that
    is already present adds to its multiplicity)."""
    n = want.size
    if first is None:
        rows = np.repeat(np.arange(n, dtype=np.int64), want)
        first = (rows, draw(rows))
    keys, tf = np.unique(first[0] * width + first[1], return_counts=True)
    for _ in range(TOPUP_ROUNDS):
        short = np.maximum(want - np.bincount(keys // width, minlength=n), 0)
        if not short.any():
            break
        rows = np.repeat(np.arange(n, dtype=np.int64), short)
        keys, at = np.unique(np.concatenate([keys, rows * width + draw(rows)]), return_inverse=True)
        tf = np.bincount(at, weights=np.concatenate([tf, np.ones(rows.size)]), minlength=keys.size)
    return keys, tf.astype(np.float64)


def _block(spec: Spec, st: _Structure, seed: int, split: int, b: int, n: int):
    """Rows of block ``b`` of a split: (feature keys, values, label keys) with keys row * width + id."""
    rng = np.random.default_rng([int(seed), split, b])
    F, L = spec.features, spec.labels
    empty = rng.random(n) < spec.empty_rows
    lam = max(spec.labels_per_row / max(1.0 - spec.empty_rows, 1e-9) - 1.0, 0.0)
    k = np.where(empty, 0, 1 + rng.poisson(lam, n)).astype(np.int64)
    k = np.minimum(k, L)
    lkeys, _ = _distinct(k, lambda rows: st.labels(rng, rows.size), L)
    lrow, lid = lkeys // L, (lkeys % L).astype(np.int32)
    kk = np.bincount(lrow, minlength=n)
    lptr = np.zeros(n + 1, np.int64)
    np.cumsum(kk, out=lptr[1:])

    # features a row: over-dispersed around nnz_per_row (Poisson of a Gamma), at least one
    mean = max(spec.nnz_per_row - 1.0, 0.0)
    m = 1 + rng.poisson(rng.gamma(spec.dispersion, mean / spec.dispersion, n))
    m = np.minimum(m, F)
    s = np.where(kk > 0, rng.binomial(m, spec.signal), 0)
    srows = np.repeat(np.arange(n, dtype=np.int64), s)
    pair = lptr[srows] + (rng.random(srows.size) * kk[srows]).astype(np.int64)
    sig = st.protos[lid[pair], rng.integers(0, spec.prototypes, srows.size)]
    nrows = np.repeat(np.arange(n, dtype=np.int64), m - s)
    rows0 = np.concatenate([srows, nrows])
    ids0 = np.concatenate([sig, st.noise(rng, nrows.size)])
    fkeys, tf = _distinct(m, lambda rows: st.noise(rng, rows.size), F, first=(rows0, ids0))
    fid = (fkeys % F).astype(np.int32)
    frow = fkeys // F
    v = (1.0 + np.log(tf)) * st.idf[fid]
    norm = np.sqrt(np.bincount(frow, weights=v * v, minlength=n))
    v = (v / norm[frow]).astype(np.float32)
    return frow, fid, v, lrow, lid


def generate_split(spec: Spec, seed: int, split: str, rows: Optional[int] = None,
                   structure: Optional[_Structure] = None, progress=None, workers: int = 0) -> XCSplit:
    """Rows of ``split`` ("train" or "test"); ``rows`` (default the spec's) takes a prefix."""
    code = {"train": 1, "test": 2}[split]
    total = int(rows if rows is not None else (spec.train_rows if split == "train" else spec.test_rows))
    st = structure or _Structure(spec, seed)
    nblocks = (total + BLOCK_ROWS - 1) // BLOCK_ROWS

    def one(b: int):
        r0 = b * BLOCK_ROWS
        n = min(BLOCK_ROWS, total - r0)
        frow, fid, v, lrow, lid = _block(spec, st, seed, code, b, BLOCK_ROWS)
        if n < BLOCK_ROWS:      # the last block: the same draws as a full block, first n rows
            fk, lk = frow < n, lrow < n
            frow, fid, v, lrow, lid = frow[fk], fid[fk], v[fk], lrow[lk], lid[lk]
        return np.bincount(frow, minlength=n), fid, v, np.bincount(lrow, minlength=n), lid
    # blocks on threads (NumPy releases the GIL in its loops), collected in order: the result
    # does not depend on the number of workers
    from pipeline.data.radixnet import parallel_map
    parts = list(parallel_map(one, nblocks, workers, progress, f"generate {split}"))
    return XCSplit(_csr([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts], total, spec.features),
                   _csr([p[3] for p in parts], [p[4] for p in parts], None, total, spec.labels))


def _csr(counts, ids, vals, n: int, width: int) -> sp.csr_matrix:
    """CSR from per-block row counts and ids that are already sorted and distinct within rows."""
    indptr = np.zeros(n + 1, np.int64)
    if counts:
        np.cumsum(np.concatenate(counts), out=indptr[1:])
    idx = np.concatenate(ids).astype(np.int32, copy=False) if ids else np.zeros(0, np.int32)
    data = np.concatenate(vals) if vals else np.ones(idx.size, np.float32)
    M = sp.csr_matrix((data, idx, indptr), shape=(n, width), copy=False)
    M.has_canonical_format = True
    return M


def generate(spec: Spec, seed: int, train_rows: Optional[int] = None, test_rows: Optional[int] = None,
             progress=None) -> Tuple[XCSplit, XCSplit]:
    st = _Structure(spec, seed)
    return (generate_split(spec, seed, "train", train_rows, st, progress),
            generate_split(spec, seed, "test", test_rows, st, progress))


def spec_from_cfg(dcfg) -> Tuple[Spec, int, int, str]:
    """(spec, train rows, test rows, the scale when not 1) of a dataset config (on size=small with
    its ``dataset.small`` preset applied)."""
    spec = Spec(**{f.name: (int if f.type == "int" else float)(dcfg.get(f.name, f.default)) for f in fields(Spec)})
    scale = float(dcfg.get("scale", 1.0))
    tr = max(1, int(round(spec.train_rows * scale)))
    te = max(1, int(round(spec.test_rows * scale)))
    return spec, tr, te, (f"scale {scale:g}" if scale != 1.0 else "")


def load(dcfg, *, cache_dir: Optional[str], seed: int, progress=None) -> XCData:
    """The generated dataset of ``dcfg`` (cached by its parameters and the seed)."""
    spec, tr, te, shrunk = spec_from_cfg(dcfg)
    name = str(dcfg.name)
    params = {"v": CACHE_VERSION, "spec": asdict(spec), "train": tr, "test": te, "seed": int(seed)}

    def build():
        a, b = generate(spec, seed, tr, te, progress)
        return {**split_arrays(a, "tr_"), **split_arrays(b, "te_")}
    arrays = cached_arrays(str(cache_dir), f"xc-synth-{name}", params, build) if cache_dir else build()
    train = split_from_arrays(arrays, spec.features, spec.labels, "tr_")
    test = split_from_arrays(arrays, spec.features, spec.labels, "te_")
    desc = spec.describe() if not shrunk else f"{shrunk}: " + Spec(**{**asdict(spec), "train_rows": tr,
                                                                      "test_rows": te}).describe()
    return XCData(name, train, test, spec.features, spec.labels, f"generated: {desc}, seed {seed}")
