"""Data core: dataset lookup, the atomic preprocessing cache, and the MNIST IDX reader."""
from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from pipeline.data import cache, mnist, paths
from pipeline.errors import DataError

SHARED_MNIST = Path(os.environ.get("PIPELINE_DATA_DIR", Path(__file__).resolve().parents[1] / "data")) / "mnist"


# ------------------------------------------------------------------------------------ paths

def test_find_in_data_dir(tmp_path):
    (tmp_path / "toy").mkdir()
    assert paths.find(OmegaConf.create({"data_dir": str(tmp_path)}), "toy") == tmp_path / "toy"


def test_find_error_names_places_and_fix(tmp_path):
    cfg = OmegaConf.create({"data_dir": str(tmp_path)})
    with pytest.raises(DataError) as e:
        paths.find(cfg, "no-such-set", "the XYZ files")
    msg = str(e.value)
    assert "\n" not in msg
    assert "'no-such-set' not found" in msg
    assert str(tmp_path / "no-such-set") in msg and str(paths.SHIPPED / "no-such-set") in msg
    assert "data_dir=" in msg and "PIPELINE_DATA_DIR" in msg and "(the XYZ files)" in msg


def test_find_error_names_each_place_once():
    with pytest.raises(DataError) as e:
        paths.find(OmegaConf.create({"data_dir": str(paths.SHIPPED)}), "no-such-set")
    assert str(e.value).count(str(paths.SHIPPED / "no-such-set")) == 1


def test_find_falls_back_to_shipped(tmp_path, monkeypatch):
    shipped = tmp_path / "shipped"
    (shipped / "toy").mkdir(parents=True)
    monkeypatch.setattr(paths, "SHIPPED", shipped)
    assert paths.find(OmegaConf.create({"data_dir": str(tmp_path / "elsewhere")}), "toy") == shipped / "toy"


# ------------------------------------------------------------------------------------ cache

def test_cache_builds_once_and_keys_on_params(tmp_path):
    calls = []

    def build():
        calls.append(1)
        return {"a": np.arange(5), "b": np.ones((2, 3), np.float32)}
    first = cache.cached_arrays(str(tmp_path), "toy", {"n": 5, "seed": 0}, build)
    again = cache.cached_arrays(str(tmp_path), "toy", {"seed": 0, "n": 5}, build)   # key order irrelevant
    assert len(calls) == 1
    assert again.keys() == first.keys() and again["b"].dtype == np.float32
    np.testing.assert_array_equal(again["a"], np.arange(5))
    cache.cached_arrays(str(tmp_path), "toy", {"n": 6, "seed": 0}, build)
    assert len(calls) == 2
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == ["toy", "toy"]
    assert cache.key({"n": 5}) != cache.key({"n": 6}) and len(cache.key({})) == 16


def test_cache_build_that_raises_writes_nothing(tmp_path):
    d = tmp_path / "c"

    def build():
        raise DataError("malformed input")
    with pytest.raises(DataError):
        cache.cached_arrays(str(d), "toy", {"n": 1}, build)
    assert not d.exists() or list(d.iterdir()) == []


def test_cache_failed_save_leaves_no_partial_file(tmp_path, monkeypatch):
    def bad_savez(f, **arrays):
        f.write(b"partial")
        raise OSError("disk full")
    monkeypatch.setattr(cache.np, "savez", bad_savez)
    with pytest.raises(OSError):
        cache.cached_arrays(str(tmp_path), "toy", {"n": 1}, lambda: {"a": np.zeros(3)})
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------ MNIST IDX

def idx_bytes(arr: np.ndarray, code: int = 0x08) -> bytes:
    return bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_images_and_labels(tmp_path, gz):
    imgs = np.arange(3 * 4 * 5, dtype=np.uint8).reshape(3, 4, 5)
    p = tmp_path / ("x.gz" if gz else "x")
    (gzip.open if gz else open)(p, "wb").write(idx_bytes(imgs))
    out = mnist.read_idx(p)
    assert out.shape == (3, 4, 5) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, imgs)
    labels = np.array([1, 2, 9], np.uint8)
    (tmp_path / "y").write_bytes(idx_bytes(labels))
    np.testing.assert_array_equal(mnist.read_idx(tmp_path / "y"), labels)


def test_read_idx_big_endian_types(tmp_path):
    a = np.array([[1.5, -2.0]], dtype=">f4")
    (tmp_path / "f").write_bytes(idx_bytes(a, 0x0D))
    np.testing.assert_array_equal(mnist.read_idx(tmp_path / "f"), a)
    b = np.array([70000, -3], dtype=">i4")
    (tmp_path / "i").write_bytes(idx_bytes(b, 0x0C))
    np.testing.assert_array_equal(mnist.read_idx(tmp_path / "i"), b)


@pytest.mark.parametrize("data, words", [
    (b"\x00\x00\x07\x01\x00\x00\x00\x01\x05", ["not an IDX file", "00000701"]),   # unknown type code
    (b"PK\x03\x04", ["not an IDX file"]),                                        # not IDX at all
    (b"\x00\x00", ["not an IDX file"]),                                          # too short
    (b"\x00\x00\x08\x03\x00\x00\x00\x02", ["truncated IDX header"]),             # dims cut off
    (idx_bytes(np.zeros((2, 3), np.uint8))[:-1], ["header says (2, 3)", "6 bytes", "5 data bytes"]),
    (idx_bytes(np.zeros((2, 3), np.uint8)) + b"\x00", ["7 data bytes"]),
])
def test_read_idx_malformed(tmp_path, data, words):
    p = tmp_path / "bad-idx3-ubyte"
    p.write_bytes(data)
    with pytest.raises(DataError) as e:
        mnist.read_idx(p)
    msg = str(e.value)
    assert msg.startswith(str(p)) and "\n" not in msg
    for w in words:
        assert w in msg, msg


def test_read_idx_missing_file(tmp_path):
    with pytest.raises(DataError, match="cannot read"):
        mnist.read_idx(tmp_path / "nope")


def _write_mnist(folder: Path, n_img: int, n_lab: int):
    folder.mkdir(parents=True)
    imgs = np.random.default_rng(0).integers(0, 256, (n_img, 28, 28), dtype=np.uint8)
    labs = np.arange(n_lab, dtype=np.uint8) % 10
    with gzip.open(folder / "t10k-images-idx3-ubyte.gz", "wb") as f:
        f.write(idx_bytes(imgs))
    (folder / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(labs))   # raw works too
    return imgs, labs


def test_mnist_load_from_data_dir(tmp_path):
    imgs, labs = _write_mnist(tmp_path / "mnist", 4, 4)
    x, y = mnist.load(OmegaConf.create({"data_dir": str(tmp_path)}), "test")
    np.testing.assert_array_equal(x, imgs)
    np.testing.assert_array_equal(y, labs)
    with pytest.raises(DataError, match="missing train-images-idx3-ubyte"):
        mnist.load(OmegaConf.create({"data_dir": str(tmp_path)}), "train")


def test_mnist_count_mismatch(tmp_path):
    _write_mnist(tmp_path / "mnist", 4, 3)
    with pytest.raises(DataError, match="4 test images but 3 labels"):
        mnist.load(OmegaConf.create({"data_dir": str(tmp_path)}), "test")


@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason=f"real MNIST not in the data dir ({SHARED_MNIST}; python -m pipeline.data.fetch mnist)")
def test_real_mnist_test_split():
    x, y = mnist.load(OmegaConf.create({"data_dir": str(SHARED_MNIST.parent)}), "test")
    assert x.shape == (10000, 28, 28) and x.dtype == np.uint8
    assert y.shape == (10000,) and set(np.unique(y)) == set(range(10))
