"""CIFAR-10 from the JPEG-packed .npz files in ``<data_dir>/cifar10-jpeg`` (its SOURCE.md says how they were made):
decoded with Pillow once and cached (pipeline/data/cache.py) as uint8 arrays."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Tuple

import numpy as np

from pipeline.data.cache import cached_arrays
from pipeline.data.paths import find
from pipeline.errors import DataError

FILES = {"train": "cifar10_train_jpeg.npz", "test": "cifar10_test_jpeg.npz"}
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def decode(path: Path) -> Tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 32, 32, 3), labels uint8 (N,)) decoded from one packed .npz file."""
    try:
        from PIL import Image
    except ImportError as e:   # pragma: no cover - Pillow is a dependency of matplotlib
        raise DataError(f"{path}: decoding CIFAR-10 JPEGs needs Pillow (pip install pillow)") from e
    try:
        with np.load(path, allow_pickle=False) as z:
            jpeg, offsets, labels = z["jpeg"], z["offsets"], z["labels"]
    except (OSError, KeyError, ValueError) as e:
        raise DataError(f"{path}: not a CIFAR-10 JPEG pack with arrays jpeg/offsets/labels ({e})") from e
    n = labels.shape[0]
    if offsets.shape != (n + 1,) or offsets[0] != 0 or offsets[-1] != jpeg.shape[0] or np.any(np.diff(offsets) <= 0):
        raise DataError(f"{path}: offsets ({offsets.shape[0]}) do not describe {n} images in {jpeg.shape[0]} bytes")
    if labels.size and int(labels.max()) >= len(CLASSES):
        raise DataError(f"{path}: label {int(labels.max())} out of range 0..9")
    images = np.empty((n, 32, 32, 3), np.uint8)
    buf = jpeg.tobytes()
    for i in range(n):
        try:
            img = Image.open(io.BytesIO(buf[offsets[i]:offsets[i + 1]])).convert("RGB")
        except Exception as e:  # noqa: BLE001 - Pillow raises several types for a corrupt image
            raise DataError(f"{path}: image {i} does not decode as JPEG ({e})") from e
        if img.size != (32, 32):
            raise DataError(f"{path}: image {i} is {img.size[0]}x{img.size[1]}, expected 32x32")
        images[i] = np.asarray(img)
    return images, labels.astype(np.uint8)


def load(cfg, split: str = "train") -> Tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 32, 32, 3) NHWC RGB, labels uint8 (N,)) for 'train' (50000) or 'test' (10000)."""
    if split not in FILES:
        raise DataError(f"CIFAR-10 split {split!r}: expected 'train' or 'test'")
    folder = find(cfg, "cifar10-jpeg", "the JPEG-packed CIFAR-10 .npz files")
    path = folder / FILES[split]
    if not path.is_file():
        raise DataError(f"{path}: missing; see the CIFAR-10 SOURCE.md for the two .npz files")
    st = path.stat()
    params = {"file": path.name, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "version": 1}

    def build():
        images, labels = decode(path)
        return {"images": images, "labels": labels}

    arrays = cached_arrays(str(cfg.cache_dir), f"cifar10-{split}", params, build)
    return arrays["images"], arrays["labels"]
