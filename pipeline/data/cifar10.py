"""CIFAR-10 in either of two forms under ``data_dir`` (or the project's ``data/``):

* ``cifar-10-batches-bin/``: the official binary version, read directly (``python -m
  pipeline.data.fetch cifar10`` downloads ``cifar-10-binary.tar.gz`` from the authors' site, checks
  its md5 and unpacks it):
  ``data_batch_1..5.bin`` and ``test_batch.bin``, each record one label byte and 3072 pixel bytes
  (1024 red, 1024 green, 1024 blue, row-major 32 x 32). Preferred when present (lossless).
* ``cifar10-jpeg/``: the images re-encoded as JPEG and packed into two .npz files (arrays
  ``jpeg``, ``offsets``, ``labels``), decoded with Pillow once and cached (pipeline/data/cache.py).
"""
from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from pipeline.data.cache import cached_arrays
from pipeline.data.paths import SHIPPED, find
from pipeline.errors import DataError

OFFICIAL = "cifar-10-batches-bin"
JPEG = "cifar10-jpeg"
FILES = {"train": "cifar10_train_jpeg.npz", "test": "cifar10_test_jpeg.npz"}
BIN_FILES = {"train": [f"data_batch_{i}.bin" for i in range(1, 6)], "test": ["test_batch.bin"]}
RECORD = 1 + 3 * 32 * 32
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
FETCH = "python -m pipeline.data.fetch cifar10"


def read_bin(path: Path) -> Tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 32, 32, 3), labels uint8 (N,)) from one file of the official binary version."""
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e})") from e
    if raw.size == 0 or raw.size % RECORD:
        raise DataError(f"{path}: {raw.size} bytes is not a whole number of {RECORD}-byte CIFAR-10 records")
    rec = raw.reshape(-1, RECORD)
    labels = rec[:, 0].copy()
    if int(labels.max()) >= len(CLASSES):
        bad = int(np.argmax(labels >= len(CLASSES)))
        raise DataError(f"{path}: record {bad} has label {int(labels[bad])}, expected 0..9")
    images = rec[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def decode(path: Path) -> Tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 32, 32, 3), labels uint8 (N,)) decoded from one packed .npz file."""
    from PIL import Image
    if not zipfile.is_zipfile(path):     # truncated, a .npy or pickle renamed, not a pack at all
        raise DataError(f"{path}: not an .npz (zip) archive: damaged or not a CIFAR-10 JPEG pack; see the CIFAR-10 "
                        f"SOURCE.md for the two .npz files, or fetch the official archive with: {FETCH}")
    try:
        with np.load(path, allow_pickle=False) as z:
            jpeg, offsets, labels = z["jpeg"], z["offsets"], z["labels"]
    except Exception as e:  # noqa: BLE001 - zipfile (a bad CRC), format or missing-key errors
        raise DataError(f"{path}: not a CIFAR-10 JPEG pack with arrays jpeg/offsets/labels ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}); see the CIFAR-10 SOURCE.md or fetch the "
                        f"official archive with: {FETCH}") from e
    for name, a, kinds in (("jpeg", jpeg, "u"), ("offsets", offsets, "iu"), ("labels", labels, "iu")):
        if a.ndim != 1 or a.dtype.kind not in kinds or (name == "jpeg" and a.dtype.itemsize != 1):
            raise DataError(f"{path}: array {name} is {a.dtype} of shape {a.shape}, expected a 1-d "
                            f"{'uint8' if name == 'jpeg' else 'integer'} array")
    n = labels.shape[0]
    if n == 0:
        raise DataError(f"{path}: holds no images; see the CIFAR-10 SOURCE.md or fetch the official archive with: {FETCH}")
    if offsets.shape != (n + 1,) or offsets[0] != 0 or offsets[-1] != jpeg.shape[0] or np.any(np.diff(offsets) <= 0):
        raise DataError(f"{path}: offsets ({offsets.shape[0]}) do not describe {n} images in {jpeg.shape[0]} bytes")
    bad = np.flatnonzero((labels < 0) | (labels >= len(CLASSES)))
    if bad.size:
        raise DataError(f"{path}: image {int(bad[0])} has label {int(labels[bad[0]])}, expected 0..9")
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


def folder(cfg) -> Optional[Path]:
    """The folder CIFAR-10 is read from (the official binary version first), or None."""
    for name in (OFFICIAL, JPEG):
        try:
            return find(cfg, name)
        except DataError:
            continue
    return None


def load(cfg, split: str = "train") -> Tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 32, 32, 3) NHWC RGB, labels uint8 (N,)) for 'train' (50000) or 'test' (10000)."""
    if split not in FILES:
        raise DataError(f"CIFAR-10 split {split!r}: expected 'train' or 'test'")
    where = folder(cfg)
    if where is None:
        roots = list(dict.fromkeys(str(Path(str(r))) for r in (cfg.data_dir, SHIPPED)))
        raise DataError(f"dataset 'cifar10' not found: no {OFFICIAL}/ or {JPEG}/ in {' or '.join(roots)}; "
                        f"fetch it with: {FETCH} (or set data_dir=... / PIPELINE_DATA_DIR)")
    if where.name == OFFICIAL:
        paths = [where / f for f in BIN_FILES[split]]
        for path in paths:
            if not path.is_file():
                raise DataError(f"{path}: missing; fetch CIFAR-10 again with: {FETCH}")

        parts = [read_bin(p) for p in paths]      # raw bytes: nothing to cache
        # the official files all hold the same number of records (10000): one with fewer was cut short
        batches = [where / f for f in BIN_FILES["train"] if (where / f).is_file()]
        full = max(batches, key=lambda f: f.stat().st_size, default=None)
        whole = full.stat().st_size // RECORD if full else 0
        for path, (_, labels) in zip(paths, parts):
            if labels.size < whole:
                raise DataError(f"{path}: {labels.size} records, {full.name} has {whole} (every file of the official "
                                f"binary version holds as many): the file is truncated; fetch CIFAR-10 again with: "
                                f"{FETCH}")
        return np.concatenate([a for a, _ in parts]), np.concatenate([b for _, b in parts])
    path = where / FILES[split]
    if not path.is_file():
        raise DataError(f"{path}: missing; see the CIFAR-10 SOURCE.md for the two .npz files, or fetch the "
                        f"official archive with: {FETCH}")
    st = path.stat()
    params = {"file": path.name, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "version": 1}

    def build():
        images, labels = decode(path)
        return {"images": images, "labels": labels}

    arrays = cached_arrays(str(cfg.cache_dir), f"cifar10-{split}", params, build)
    return arrays["images"], arrays["labels"]
