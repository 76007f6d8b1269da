"""Data for the wide models: loading (svmlight, Criteo, generator) and the cuWide preprocessing.

Preprocessing (paper §4.1, §4.3, §5.1), done once and cached on disk keyed by its parameters:

1. samples are shuffled once (seeded); the validation split is kept apart;
2. feature ids are renumbered by descending frequency **on the training split only** (ties and
   features never seen in training keep their relative order, at the end);
3. training samples are cut into chunks of ``chunk`` consecutive samples;
4. inside a chunk the nonzeros ("edges") are stored feature-major (sorted by feature, then sample),
   the hot part (renumbered id < ``hot``) first, then the cold part; each part is padded with
   zero-valued edges to a multiple of 4 so that kernels can use 128-bit loads.

Edge arrays: ``fid`` (int32 renumbered id), ``sid`` (int32 sample index inside the chunk), ``val``
(float32); ``cptr[c]..cptr[c+1]`` is chunk c, ``chot[c]`` the end of its hot part. The CSR of the
same (renumbered, shuffled) training rows is kept for the stage baseline and the references.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np
import scipy.sparse as sp

from pipeline.data.cache import cached_arrays, file_stamp
from pipeline.errors import DataError

PAD = 4


@dataclass
class WideData:
    Xtr: sp.csr_matrix
    ytr: np.ndarray
    Xva: sp.csr_matrix
    yva: np.ndarray
    cptr: np.ndarray        # int64 [nch+1]
    chot: np.ndarray        # int64 [nch]
    fid: np.ndarray         # int32 [edges]
    sid: np.ndarray         # int32 [edges]
    val: np.ndarray         # float32 [edges]
    freq: np.ndarray        # int64 [d]: training frequency of each renumbered feature
    chunk: int
    hot: int

    @property
    def d(self) -> int:
        return self.Xtr.shape[1]

    @property
    def n(self) -> int:
        return self.Xtr.shape[0]

    @property
    def n_chunks(self) -> int:
        return len(self.chot)

    def rows_of(self, chunks, n: Optional[int] = None) -> int:
        """Rows in the chunks ``chunks`` (ids) of ``n`` rows (default: the training rows; the last
        chunk may be short)."""
        c = np.asarray(chunks, dtype=np.int64)
        return int(np.minimum(self.chunk, (self.n if n is None else n) - c * self.chunk).sum())

    @property
    def edge_bytes(self) -> int:
        return int(self.fid.nbytes + self.sid.nbytes + self.val.nbytes + self.ytr.nbytes)


# ------------------------------------------------------------------------------------ loading

def source(cfg):
    """(identity dict for the cache key, loader returning (Xtr, ytr, Xva, yva))."""
    d = cfg.dataset
    seed = int(cfg.seed)
    if d.format == "synth":
        from pipeline.data.ctr_synth import SHAPES, generate
        rows0, feats0, nnz = SHAPES[d.shape]
        scale = float(d.scale)
        rows = max(200, int(round(rows0 * scale)))
        feats = int(d.features or feats0)
        ident = {"synth": d.shape, "rows": rows, "features": feats, "nnz": nnz, "alpha": float(d.alpha),
                 "seed": seed, "val_fraction": float(d.val_fraction)}

        def load():
            X, y = generate(rows, feats, nnz, seed, alpha=float(d.alpha))
            nva = max(1, int(round(rows * float(d.val_fraction))))
            return X[:-nva], y[:-nva], X[-nva:], y[-nva:]
        return ident, load

    from pipeline.data import ctr
    if d.format in ctr.FORMATS:            # raw click logs (criteo, avazu, csv): the hashing reader
        return ctr.source(cfg)

    from pipeline.data.paths import find
    folder = find(cfg, str(d.path or d.name))
    ftr, fva = folder / str(d.train), folder / str(d.val)
    for f in (ftr, fva):
        if not f.is_file():
            raise DataError(f"{f}: missing file of dataset '{d.name}' (dataset.train / dataset.val)")
    rows = int(d.rows)
    ident = {"format": d.format, "train": file_stamp(ftr), "val": file_stamp(fva), "features": int(d.features),
             "rows": rows}

    def load():
        from pipeline.data import svmlight
        Xtr, ytr = svmlight.load(ftr, int(d.features) or None)
        Xva, yva = svmlight.load(fva, Xtr.shape[1])
        if rows:
            Xtr, ytr = Xtr[:rows], ytr[:rows]
        return Xtr, ytr, Xva, yva
    return ident, load


# ------------------------------------------------------------------------------ preprocessing

def renumber(Xtr: sp.csr_matrix) -> Tuple[np.ndarray, np.ndarray]:
    """(new id of each old id, training frequency in new-id order): descending frequency."""
    d = Xtr.shape[1]
    freq = np.bincount(Xtr.indices, minlength=d).astype(np.int64)
    order = np.argsort(-freq, kind="stable")          # new id -> old id
    new = np.empty(d, np.int32)
    new[order] = np.arange(d, dtype=np.int32)
    return new, freq[order]


def apply_ids(X: sp.csr_matrix, new: np.ndarray) -> sp.csr_matrix:
    Y = sp.csr_matrix((X.data.astype(np.float32), new[X.indices], X.indptr.copy()), shape=X.shape)
    Y.sort_indices()
    return Y


def chunk_edges(X: sp.csr_matrix, chunk: int, hot: int) -> Dict[str, np.ndarray]:
    """Feature-major, hot-first, 4-padded edge arrays of the chunks of X (rows in order)."""
    n = X.shape[0]
    nch = (n + chunk - 1) // chunk
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(X.indptr))
    cols = X.indices.astype(np.int64)
    ch = rows // chunk
    cold = (cols >= hot).astype(np.int64)
    key = ((ch * 2 + cold) * X.shape[1] + cols) * chunk + (rows % chunk)
    o = np.argsort(key, kind="stable")
    seg = (ch * 2 + cold)[o]                                   # segment of each sorted edge
    counts = np.bincount(seg, minlength=2 * nch)
    padded = (counts + PAD - 1) // PAD * PAD
    out_start = np.concatenate([[0], np.cumsum(padded)]).astype(np.int64)     # segment starts, padded
    in_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    pos = out_start[seg] + (np.arange(len(seg)) - in_start[seg])
    E = int(out_start[-1])
    fid = np.zeros(E, np.int32)
    sid = np.zeros(E, np.int32)
    val = np.zeros(E, np.float32)
    fid[pos] = cols[o]
    sid[pos] = (rows[o] % chunk)
    val[pos] = X.data[o]
    return {"cptr": out_start[0::2].copy(), "chot": out_start[1::2].copy(), "fid": fid, "sid": sid, "val": val}


def build_arrays(Xtr, ytr, Xva, yva, chunk: int, hot: int, seed: int) -> Dict[str, np.ndarray]:
    """Steps 1-4 of the module docstring on loaded data; a dict of arrays (what the cache stores)."""
    perm = np.random.default_rng(seed).permutation(Xtr.shape[0])   # shuffle once
    Xtr, ytr = Xtr[perm], ytr[perm]
    new, freq = renumber(Xtr)
    Xtr, Xva = apply_ids(Xtr, new), apply_ids(Xva, new)
    e = chunk_edges(Xtr, chunk, hot)
    return {"tr_indptr": Xtr.indptr.astype(np.int64), "tr_indices": Xtr.indices, "tr_data": Xtr.data,
            "ytr": ytr.astype(np.float32), "va_indptr": Xva.indptr.astype(np.int64),
            "va_indices": Xva.indices, "va_data": Xva.data, "yva": yva.astype(np.float32),
            "shape": np.array([Xtr.shape[1]], np.int64), "freq": freq, **e}


def from_arrays(a: Dict[str, np.ndarray], chunk: int, hot: int) -> WideData:
    d = int(a["shape"][0])
    Xtr = sp.csr_matrix((a["tr_data"], a["tr_indices"], a["tr_indptr"]), shape=(len(a["ytr"]), d))
    Xva = sp.csr_matrix((a["va_data"], a["va_indices"], a["va_indptr"]), shape=(len(a["yva"]), d))
    return WideData(Xtr, a["ytr"], Xva, a["yva"], a["cptr"], a["chot"], a["fid"], a["sid"], a["val"],
                    a["freq"], chunk, hot)


def prepare(cfg, chunk: int, hot: int, cache: bool = True) -> WideData:
    ident, load = source(cfg)
    params = {"v": 1, "data": ident, "chunk": chunk, "hot": hot, "seed": int(cfg.seed)}

    def build():
        Xtr, ytr, Xva, yva = load()
        if Xtr.shape[0] == 0:
            raise DataError(f"dataset '{cfg.dataset.name}': the training split is empty")
        return build_arrays(Xtr, ytr, Xva, yva, chunk, hot, int(cfg.seed))

    a = cached_arrays(str(cfg.cache_dir), f"wide-{cfg.dataset.name}", params, build) if cache else build()
    return from_arrays(a, chunk, hot)
