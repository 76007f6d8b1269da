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


# ------------------------------------------------------------------------------------ CIFAR-10

def _jpeg() -> np.ndarray:
    import io
    from PIL import Image
    b = io.BytesIO()
    Image.fromarray(np.full((32, 32, 3), 90, np.uint8)).save(b, "JPEG")
    return np.frombuffer(b.getvalue(), np.uint8)


def _pack(path: Path, **over) -> Path:
    jb = _jpeg()
    arrays = {"jpeg": np.concatenate([jb, jb]), "offsets": np.array([0, jb.size, 2 * jb.size]),
              "labels": np.array([3, 7], np.uint8), **over}
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


@pytest.mark.parametrize("over, words", [
    ({"labels": np.array([3, -1])}, ["image 1 has label -1", "0..9"]),          # was 255 after astype
    ({"labels": np.array([3.0, 7.5])}, ["labels", "float64", "integer"]),         # was truncated to 7
    ({"labels": np.array([[3], [7]])}, ["labels", "(2, 1)"]),
    ({"labels": np.array(3)}, ["labels", "shape ()"]),                            # was an IndexError
    ({"labels": np.zeros(0, np.uint8), "offsets": np.array([0]), "jpeg": np.zeros(0, np.uint8)}, ["no images"]),
], ids=["negative-label", "float-labels", "2d-labels", "0d-labels", "no-images"])
def test_cifar_pack_wrong_arrays(tmp_path, over, words):
    p = _pack(tmp_path / "pack.npz", **over)
    from pipeline.data import cifar10
    raises(lambda: cifar10.decode(p), p, *words)


@pytest.mark.parametrize("damage", ["truncate", "flip", "npy"])
def test_cifar_pack_damaged_file(tmp_path, damage):
    from pipeline.data import cifar10
    p = _pack(tmp_path / "pack.npz")
    raw = p.read_bytes()
    if damage == "truncate":
        p.write_bytes(raw[:len(raw) // 2])                      # was zipfile.BadZipFile
    elif damage == "flip":
        b = bytearray(raw)
        b[100] ^= 0xFF                                          # inside jpeg.npy: a bad CRC-32
        p.write_bytes(bytes(b))
    else:
        np.save(tmp_path / "x.npy", np.zeros(3))                # was a TypeError
        (tmp_path / "x.npy").replace(p)
    raises(lambda: cifar10.decode(p), p, "CIFAR-10", "fetch")


def test_cifar_bad_pack_caches_nothing_and_the_fixed_one_loads(tmp_path):
    from pipeline.data import cifar10
    d = tmp_path / "data" / cifar10.JPEG
    d.mkdir(parents=True)
    cfg = OmegaConf.create({"data_dir": str(tmp_path / "data"), "cache_dir": str(tmp_path / "cache")})
    p = _pack(d / cifar10.FILES["test"], labels=np.array([3, -1]))
    raises(lambda: cifar10.load(cfg, "test"), p, "label -1")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    _pack(p)
    x, y = cifar10.load(cfg, "test")
    assert x.shape == (2, 32, 32, 3) and y.tolist() == [3, 7]
