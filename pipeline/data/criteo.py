"""Raw Criteo (Kaggle Display Advertising) rows -> hashed sparse rows, as the LIBSVM ``criteo`` set is
built: 13 integer fields (log-binned: v > 2 -> floor(ln(v)^2)) and 26 categorical fields, each
(field, value) pair hashed (scikit-learn's FeatureHasher, MurmurHash3, no sign flip) into
``n_features`` (10^6) dimensions with value 1; an empty field hashes as its own value, so 39 nonzeros a row (fewer on a collision).
"""
from __future__ import annotations

import gzip
import math
from pathlib import Path
from typing import List, Tuple

import numpy as np
import scipy.sparse as sp

from pipeline.errors import DataError

N_INT, N_CAT = 13, 26
N_FEATURES = 1_000_000


def int_bin(v: int) -> int:
    return int(math.floor(math.log(v) ** 2)) if v > 2 else v


def row_tokens(fields: List[str], where: str) -> List[str]:
    toks = []
    for j, f in enumerate(fields[1:1 + N_INT], 1):
        if f == "":
            toks.append(f"I{j}=")          # missing is a value of its own (39 tokens a row)
            continue
        try:
            v = int(f)
        except ValueError:
            raise DataError(f"{where}: integer field I{j} is {f!r}, not an integer") from None
        toks.append(f"I{j}={int_bin(v)}")
    for j, f in enumerate(fields[1 + N_INT:], 1):
        toks.append(f"C{j}={f}")
    return toks


def read_tokens(path) -> Tuple[List[List[str]], np.ndarray]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such Criteo TSV file")
    opener = gzip.open if path.suffix == ".gz" else open
    rows, labels = [], []
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for no, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line:
                continue
            fields = line.split("\t")
            where = f"{path}:{no}"
            if len(fields) != 1 + N_INT + N_CAT:
                raise DataError(f"{where}: {len(fields)} tab-separated fields, expected 40 (label, I1..I13, C1..C26)")
            if fields[0] not in ("0", "1"):
                raise DataError(f"{where}: label {fields[0]!r} is not 0 or 1")
            labels.append(float(fields[0]))
            rows.append(row_tokens(fields, where))
    return rows, np.asarray(labels, np.float32)


def hash_rows(rows: List[List[str]], n_features: int = N_FEATURES) -> sp.csr_matrix:
    from sklearn.feature_extraction import FeatureHasher
    h = FeatureHasher(n_features=n_features, input_type="string", alternate_sign=False, dtype=np.float32)
    X = sp.csr_matrix(h.transform(rows), dtype=np.float32)
    X.data[:] = 1.0          # a (rare) hash collision inside a row stays a single 1
    X.sort_indices()
    return X


def load(path, n_features: int = N_FEATURES) -> Tuple[sp.csr_matrix, np.ndarray]:
    rows, y = read_tokens(path)
    return hash_rows(rows, n_features), y
