"""svmlight / LIBSVM text reader (optionally gzipped), through scikit-learn's ``load_svmlight_file``.

Labels are normalised to {0, 1} from either {0, 1} or {-1, +1}; feature ids are 1-based (LIBSVM
convention). Anything wrong (a malformed line, an id beyond the declared dimension, a label outside
the two conventions, NaN/inf values) raises a one-line :class:`DataError` naming the file and line.
Rows with a label and no features are accepted (an all-zero sample).
"""
from __future__ import annotations

import gzip
import math
from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import scipy.sparse as sp

from pipeline.data import F32_MAX, READ_ERRORS, not_a_file
from pipeline.errors import DataError

ID_MAX = 2 ** 31 - 1            # scikit-learn stores feature ids as int32


def _line_problem(line: str, n_features: Optional[int]) -> Optional[str]:
    """Why this line is not valid svmlight (None when it is)."""
    body = line.split("#", 1)[0].strip()
    if not body:
        return None                       # blank lines and comments are skipped by the reader too
    toks = body.split()
    try:
        lab = float(toks[0])
    except ValueError:
        return f"label {toks[0][:40]!r} is not a number"
    if lab not in (0.0, 1.0, -1.0):
        return f"label {toks[0]!r} is outside {{0,1}} and {{-1,+1}}"
    prev = 0
    for t in toks[1:]:
        idx, sep, val = t.partition(":")
        if not sep:
            return f"token {t!r} is not 'index:value'"
        if idx == "qid":
            continue
        try:
            i = int(idx)
        except ValueError:
            return f"feature index {idx!r} is not an integer"
        try:
            v = float(val)
        except ValueError:
            return f"value {val!r} of feature {i} is not a number"
        if i < 1:
            return f"feature index {i} < 1 (LIBSVM ids are 1-based)"
        if i > ID_MAX:
            return f"feature index {idx[:40]} exceeds {ID_MAX} (ids are stored as int32)"
        if n_features is not None and i > n_features:
            return f"feature index {i} exceeds the declared dimension {n_features}"
        if not math.isfinite(v):
            return f"value {val!r} of feature {i} is not finite"
        if abs(v) > F32_MAX:
            return f"value {val!r} of feature {i} does not fit in float32"
        if i <= prev:
            return f"feature indices are not increasing ({prev} then {i})"
        prev = i
    return None


def _fail(path: Path, n_features: Optional[int], fallback: str):
    """DataError at the first bad line (``fallback`` when no line is)."""
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8", errors="replace") as f:
            for no, line in enumerate(f, 1):
                why = _line_problem(line, n_features)
                if why:
                    raise DataError(f"{path}:{no}: {why}; fix or remove that line")
    except READ_ERRORS as e:     # a truncated or corrupt gzip stream
        raise DataError(f"{path}: cannot be read ({type(e).__name__}: {e}); restore the file") from None
    raise DataError(f"{path}: {fallback}")


def load(path, n_features: Optional[int] = None) -> Tuple[sp.csr_matrix, np.ndarray]:
    """(X float32 CSR with ``n_features`` columns (default: the largest id), y float32 in {0,1})."""
    from sklearn.datasets import load_svmlight_file

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: {not_a_file(path)} (svmlight)")
    try:
        X, y = load_svmlight_file(str(path), n_features=n_features, dtype=np.float32, zero_based=False)
    except Exception as e:  # sklearn's messages name neither file nor line
        _fail(path, n_features, f"not valid svmlight ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    if X.shape[0] == 0:
        raise DataError(f"{path}: no samples (the file is empty or holds only comments)")
    if X.nnz and not np.all(np.isfinite(X.data)):
        _fail(path, n_features, "contains NaN or infinite values")
    labels = set(np.unique(y).tolist())
    if not (labels <= {0.0, 1.0} or labels <= {-1.0, 1.0}):
        _fail(path, n_features, f"labels {sorted(labels)[:5]} are outside {{0,1}} and {{-1,+1}}")
    if n_features is None and X.shape[1] == 0:
        X = sp.csr_matrix((X.shape[0], 1), dtype=np.float32)
    X = sp.csr_matrix(X, dtype=np.float32)
    X.sort_indices()
    return X, (y > 0).astype(np.float32)
