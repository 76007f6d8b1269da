"""MNIST in its original IDX format (gzip-compressed or raw) in ``<data_dir>/mnist/``; ``python -m
pipeline.data.fetch mnist`` downloads the four official files there and checks their md5s."""
from __future__ import annotations

import gzip
import math
import struct
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from pipeline.data.paths import find
from pipeline.data import READ_ERRORS
from pipeline.errors import DataError

FETCH = "python -m pipeline.data.fetch mnist"
_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (``.gz`` or raw); DataError naming the file on a malformed header/size."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except READ_ERRORS as e:     # a directory, a truncated or corrupt gzip stream
        raise DataError(f"{path}: cannot read ({e}); fetch it again with: {FETCH}") from e
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _DTYPES:
        raise DataError(f"{path}: not an IDX file (bad magic {data[:4].hex() or 'none: the file is empty'}); fetch it again "
                        f"with: {FETCH}")
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise DataError(f"{path}: truncated IDX header ({len(data)} bytes, {ndim} dimensions need {4 + 4 * ndim})")
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    dtype = np.dtype(_DTYPES[data[2]])
    expected = math.prod(dims) * dtype.itemsize
    body = data[4 + 4 * ndim:]
    if len(body) != expected:
        cut = ""
        if len(body) < expected and dims:
            record = math.prod(dims[1:]) * dtype.itemsize
            cut = (f" ({len(body) // record} whole records of {dims[0]}): the file is truncated; fetch it again "
                   f"with: {FETCH}")
        raise DataError(f"{path}: header says {dims} ({expected} bytes) but the file has {len(body)} data bytes{cut}")
    return np.frombuffer(body, dtype=dtype).reshape(dims)


def _check(path: Path, a: np.ndarray, shape: Tuple[Optional[int], ...], what: str) -> np.ndarray:
    """``a`` if it is a uint8 array of ``shape`` (None: any length) with at least one item."""
    if a.dtype != np.uint8 or a.ndim != len(shape) or any(w is not None and w != n for w, n in zip(shape, a.shape)):
        want = " x ".join("N" if w is None else str(w) for w in shape)
        raise DataError(f"{path}: holds {a.dtype} {' x '.join(map(str, a.shape)) or 'scalar'}, expected uint8 "
                        f"{want} ({what}); is it the right file? fetch it again with: {FETCH}")
    if a.shape[0] == 0:
        raise DataError(f"{path}: holds no {what}; fetch it again with: {FETCH}")
    return a


def _file(folder: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    raise DataError(f"{folder}: missing {stem}(.gz); fetch the four files with: {FETCH}")


def folder(cfg) -> Optional[Path]:
    """The MNIST folder, or None."""
    try:
        return find(cfg, "mnist")
    except DataError:
        return None


def load(cfg, split: str = "train") -> Tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 28, 28), labels uint8 (N,)) for split 'train' (60000) or 'test' (10000)."""
    where = find(cfg, "mnist", f"fetch it with: {FETCH}")
    prefix = "train" if split == "train" else "t10k"
    fi, fl = _file(where, f"{prefix}-images-idx3-ubyte"), _file(where, f"{prefix}-labels-idx1-ubyte")
    images = _check(fi, read_idx(fi), (None, 28, 28), "images")
    labels = _check(fl, read_idx(fl), (None,), "labels")
    if int(labels.max()) > 9:
        bad = int(np.argmax(labels > 9))
        raise DataError(f"{fl}: record {bad} has label {int(labels[bad])}, expected 0..9; fetch it again with: {FETCH}")
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"{where}: {images.shape[0]} {split} images but {labels.shape[0]} labels")
    return images, labels
