"""Raw Criteo (Kaggle Display Advertising) rows -> hashed sparse rows, as the LIBSVM ``criteo`` set is
built: 13 integer fields (log-binned: v > 2 -> floor(ln(v)^2)) and 26 categorical fields, each
(field, value) pair hashed (scikit-learn's FeatureHasher, MurmurHash3, no sign flip) into
``n_features`` (10^6) dimensions with value 1; an empty field hashes as its own value, so 39 nonzeros a row
(fewer on a collision). The ``criteo`` layout of the click-log reader :mod:`pipeline.data.ctr`.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
import scipy.sparse as sp

from pipeline.data import ctr

N_FEATURES = ctr.N_FEATURES
int_bin = ctr.log_squared


def load(path, n_features: int = N_FEATURES, rows: int = 0, progress: bool = False) -> Tuple[sp.csr_matrix, np.ndarray]:
    return ctr.read(path, ctr.layout_of({"format": "criteo"}), n_features, rows, progress)
