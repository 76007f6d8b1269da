"""Malformed inputs of every data reader: each raises the project's one-line DataError naming the
file (and line or record where there is one), never a raw library exception or a silent wrong
result, and nothing is cached from a broken file."""
from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from pipeline.data import mnist
from pipeline.errors import DataError


def raises(fn, *words):
    """The DataError of ``fn()``: one line holding every word."""
    with pytest.raises(DataError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg, msg
    for w in words:
        assert str(w) in msg, msg
    return msg


def corrupt_gzip(data: bytes) -> bytes:
    """A gzip stream whose deflate data is damaged (zlib reports an invalid block, not a CRC)."""
    g = bytearray(gzip.compress(data))
    g[10:14] = b"\xff\xff\xff\xff"     # first bytes of the deflate stream: an invalid block type
    return bytes(g)


# ------------------------------------------------------------------------------------ MNIST

def idx_bytes(arr: np.ndarray, code: int = 0x08) -> bytes:
    return bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


@pytest.mark.parametrize("data", [
    gzip.compress(idx_bytes(np.zeros((50, 28, 28), np.uint8)))[:-40],   # truncated gzip
    corrupt_gzip(idx_bytes(np.zeros((50, 28, 28), np.uint8))),            # damaged deflate data
], ids=["truncated", "damaged"])
def test_idx_broken_gzip(tmp_path, data):
    p = tmp_path / "train-images-idx3-ubyte.gz"
    p.write_bytes(data)
    raises(lambda: mnist.read_idx(p), p, "cannot read", "fetch")


def test_idx_huge_header_size_is_exact(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(bytes([0, 0, 8, 3]) + struct.pack(">3I", 2 ** 32 - 1, 2 ** 32 - 1, 2 ** 32 - 1))
    raises(lambda: mnist.read_idx(p), p, f"({(2 ** 32 - 1) ** 3} bytes)")    # not an int64 overflow


def _mnist(tmp_path: Path, images: bytes, labels: bytes):
    d = tmp_path / "mnist"
    d.mkdir()
    (d / "t10k-images-idx3-ubyte").write_bytes(images)
    (d / "t10k-labels-idx1-ubyte").write_bytes(labels)
    return lambda: mnist.load(OmegaConf.create({"data_dir": str(tmp_path)}), "test"), d


IMGS = idx_bytes(np.zeros((3, 28, 28), np.uint8))
LABS = idx_bytes(np.array([1, 2, 3], np.uint8))


@pytest.mark.parametrize("images, labels, culprit, words", [
    (IMGS, idx_bytes(np.array([1, 200, 3], np.uint8)), "labels", ["record 1 has label 200", "0..9"]),
    (LABS, IMGS, "images", ["holds uint8 3,", "N x 28 x 28"]),                         # swapped files
    (idx_bytes(np.zeros((3, 10, 10), np.uint8)), LABS, "images", ["3 x 10 x 10"]),
    (idx_bytes(np.zeros((3, 28, 28), ">f4"), 0x0D), LABS, "images", [">f4"]),
    (IMGS, idx_bytes(np.array([[1], [2], [3]], np.uint8)), "labels", ["3 x 1", "expected uint8 N "]),
    (idx_bytes(np.zeros((0, 28, 28), np.uint8)), idx_bytes(np.zeros(0, np.uint8)), "images", ["no images"]),
], ids=["label-200", "swapped", "10x10", "float", "2d-labels", "no-rows"])
def test_mnist_load_wrong_content(tmp_path, images, labels, culprit, words):
    load, d = _mnist(tmp_path, images, labels)
    raises(load, d / f"t10k-{culprit}-idx{3 if culprit == 'images' else 1}-ubyte", *words)


def test_mnist_empty_file(tmp_path):
    load, d = _mnist(tmp_path, b"", LABS)
    raises(load, d / "t10k-images-idx3-ubyte", "the file is empty")
