"""MNIST in its original IDX format (gzip-compressed or raw), read from ``<data_dir>/mnist``."""
from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Tuple

import numpy as np

from pipeline.data.paths import find
from pipeline.errors import DataError

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (``.gz`` or raw); DataError naming the file on a malformed header/size."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e})") from e
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _DTYPES:
        raise DataError(f"{path}: not an IDX file (bad magic {data[:4].hex()})")
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise DataError(f"{path}: truncated IDX header ({len(data)} bytes, {ndim} dimensions need {4 + 4 * ndim})")
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    dtype = np.dtype(_DTYPES[data[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    body = data[4 + 4 * ndim:]
    if len(body) != expected:
        raise DataError(f"{path}: header says {dims} ({expected} bytes) but the file has {len(body)} data bytes")
    return np.frombuffer(body, dtype=dtype).reshape(dims)


def _file(folder: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    raise DataError(f"{folder}: missing {stem}(.gz); see the MNIST SOURCE.md for the four files")


def load(cfg, split: str = "train") -> Tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 28, 28), labels uint8 (N,)) for split 'train' (60000) or 'test' (10000)."""
    folder = find(cfg, "mnist", "MNIST IDX files")
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(_file(folder, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(_file(folder, f"{prefix}-labels-idx1-ubyte"))
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"{folder}: {images.shape[0]} {split} images but {labels.shape[0]} labels")
    return images, labels
