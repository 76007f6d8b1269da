"""python -m pipeline.data.fetch against tiny archives in the official formats, served from a local
folder by file:// URL (no network): checksums, unpacking, what the loaders read from the result,
and the one-line errors (checksum mismatch, missing file, damaged archive)."""
from __future__ import annotations

import gzip
import hashlib
import io
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from pipeline.data import cifar10, fetch, mnist


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def _cifar_records(rng, n):
    labels = rng.integers(0, 10, n).astype(np.uint8)
    chw = rng.integers(0, 256, (n, 3, 32, 32)).astype(np.uint8)       # the format: R plane, G plane, B plane
    raw = np.concatenate([labels[:, None], chw.reshape(n, -1)], axis=1).tobytes()
    return raw, chw.transpose(0, 2, 3, 1), labels


def _add(tar, name, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def make_cifar_archive(folder: Path, rng, per_batch=3, test=4, drop=None, extra=()):
    """cifar-10-binary.tar.gz as the authors ship it (with a readme), tiny; returns the expected arrays."""
    train_x, train_y = [], []
    with tarfile.open(folder / "cifar-10-binary.tar.gz", "w:gz") as tar:
        for i in range(1, 6):
            raw, x, y = _cifar_records(rng, per_batch)
            train_x.append(x)
            train_y.append(y)
            if f"data_batch_{i}.bin" != drop:
                _add(tar, f"cifar-10-batches-bin/data_batch_{i}.bin", raw)
        raw, tx, ty = _cifar_records(rng, test)
        _add(tar, "cifar-10-batches-bin/test_batch.bin", raw)
        _add(tar, "cifar-10-batches-bin/batches.meta.txt", "\n".join(cifar10.CLASSES).encode())
        _add(tar, "cifar-10-batches-bin/readme.html", b"<html></html>")
        for name, data in extra:
            _add(tar, name, data)
    return np.concatenate(train_x), np.concatenate(train_y), tx, ty


def _idx(arr: np.ndarray) -> bytes:
    return struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def make_mnist_files(folder: Path, rng, n_train=7, n_test=5):
    data = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, (n, 28, 28)).astype(np.uint8)
        y = rng.integers(0, 10, n).astype(np.uint8)
        (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(x)))
        (folder / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(y)))
        data[prefix] = (x, y)
    return data


@pytest.fixture
def mirror(tmp_path):
    d = tmp_path / "mirror"
    d.mkdir()
    return d


def _trust_mirror(monkeypatch, mirror: Path):
    """Point the published checksums at the tiny archives (the real ones are for the real files)."""
    sources = {}
    for name, src in fetch.SOURCES.items():
        files = tuple(fetch.Remote(r.name, r.urls, _md5(mirror / r.name)) for r in src.files)
        sources[name] = fetch.Source(files, src.target, src.doc)
    monkeypatch.setattr(fetch, "SOURCES", sources)


def _cfg(data_dir: Path, tmp_path: Path):
    return OmegaConf.create({"data_dir": str(data_dir), "cache_dir": str(tmp_path / "cache")})


def test_fetch_unpacks_what_the_loaders_read(mirror, tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(0)
    xtr, ytr, xte, yte = make_cifar_archive(mirror, rng)
    digits = make_mnist_files(mirror, rng)
    _trust_mirror(monkeypatch, mirror)
    data = tmp_path / "data"
    assert fetch.main(["cifar10", "mnist", "--data-dir", str(data), "--mirror", mirror.as_uri()]) == 0
    out = capsys.readouterr().out
    assert f"{mirror.as_uri()}/cifar-10-binary.tar.gz" in out and "checked and unpacked" in out
    assert sorted(p.name for p in (data / "cifar-10-batches-bin").iterdir()) == sorted(fetch.CIFAR_MEMBERS)
    assert not list(data.glob(".fetch-*")), "the download folder was left behind"
    cfg = _cfg(data, tmp_path)
    x, y = cifar10.load(cfg, "train")
    np.testing.assert_array_equal(x, xtr)
    np.testing.assert_array_equal(y, ytr)
    x, y = cifar10.load(cfg, "test")
    np.testing.assert_array_equal(x, xte)
    np.testing.assert_array_equal(y, yte)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x, y = mnist.load(cfg, split)
        np.testing.assert_array_equal(x, digits[prefix][0])
        np.testing.assert_array_equal(y, digits[prefix][1])
    # a second fetch keeps what is there; --force fetches again
    assert fetch.main(["mnist", "--data-dir", str(data), "--mirror", mirror.as_uri()]) == 0
    assert "already in" in capsys.readouterr().out
    assert fetch.main(["mnist", "--data-dir", str(data), "--mirror", mirror.as_uri(), "--force"]) == 0
    assert "checked and unpacked" in capsys.readouterr().out


def test_checksum_mismatch_keeps_nothing(mirror, tmp_path, capsys):
    make_cifar_archive(mirror, np.random.default_rng(1))
    make_mnist_files(mirror, np.random.default_rng(2))
    data = tmp_path / "data"
    for name in ("cifar10", "mnist"):
        assert fetch.main([name, "--data-dir", str(data), "--mirror", mirror.as_uri()]) == 2
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
        first = fetch.SOURCES[name].files[0]
        assert len(err) == 1 and err[0].startswith(f"error: {first.name}: md5 "), err
        assert f"does not match the published {first.md5}" in err[0] and mirror.as_uri() in err[0], err[0]
    assert not data.exists() or not any(data.iterdir()), list(data.iterdir())


def test_official_checksums_are_the_published_ones():
    assert fetch.SOURCES["cifar10"].files[0].md5 == "c32a1d4ab5d03f1284b67883e8d87530"
    assert fetch.SOURCES["cifar10"].files[0].urls == ("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",)
    md5 = {r.name: r.md5 for r in fetch.SOURCES["mnist"].files}
    assert md5 == {"train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                   "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
                   "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
                   "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c"}


def test_missing_file_on_the_mirror(mirror, tmp_path, capsys):
    assert fetch.main(["mnist", "--data-dir", str(tmp_path / "d"), "--mirror", mirror.as_uri()]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: train-images-idx3-ubyte.gz: cannot download"), err
    assert "--mirror" in err[0]


def test_archive_without_a_batch_is_refused(mirror, tmp_path, monkeypatch, capsys):
    make_cifar_archive(mirror, np.random.default_rng(3), drop="data_batch_4.bin")
    _trust_mirror_cifar_only(monkeypatch, mirror)
    data = tmp_path / "data"
    assert fetch.main(["cifar10", "--data-dir", str(data), "--mirror", mirror.as_uri()]) == 2
    err = capsys.readouterr().err
    assert "no cifar-10-batches-bin/data_batch_4.bin in the archive" in err, err
    assert not (data / "cifar-10-batches-bin").exists()


def test_only_the_known_members_are_extracted(mirror, tmp_path, monkeypatch):
    make_cifar_archive(mirror, np.random.default_rng(4), extra=[("../escape.txt", b"x"),
                                                                 ("cifar-10-batches-bin/../../evil.bin", b"x")])
    _trust_mirror_cifar_only(monkeypatch, mirror)
    data = tmp_path / "data"
    assert fetch.main(["cifar10", "--data-dir", str(data), "--mirror", mirror.as_uri()]) == 0
    assert sorted(p.name for p in data.rglob("*") if p.is_file()) == sorted(fetch.CIFAR_MEMBERS)
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "evil.bin").exists()


def test_env_mirror(mirror, tmp_path, monkeypatch):
    make_mnist_files(mirror, np.random.default_rng(5))
    _trust_mirror_mnist_only(monkeypatch, mirror)
    monkeypatch.setenv("PIPELINE_DATA_MIRROR", mirror.as_uri())
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "envdata"))
    assert fetch.main(["mnist"]) == 0
    assert (tmp_path / "envdata" / "mnist" / "t10k-labels-idx1-ubyte.gz").is_file()


def test_damaged_cifar_file_names_file_and_record(tmp_path):
    d = tmp_path / "cifar-10-batches-bin"
    d.mkdir()
    (d / "data_batch_1.bin").write_bytes(bytes(cifar10.RECORD + 5))
    from pipeline.errors import DataError
    with pytest.raises(DataError, match=r"data_batch_1\.bin: 3078 bytes is not a whole number of 3073-byte"):
        cifar10.read_bin(d / "data_batch_1.bin")
    rec = bytearray(cifar10.RECORD)
    rec[0] = 12
    (d / "test_batch.bin").write_bytes(bytes(rec))
    with pytest.raises(DataError, match=r"test_batch\.bin: record 0 has label 12"):
        cifar10.read_bin(d / "test_batch.bin")


def _trust_mirror_cifar_only(monkeypatch, mirror):
    src = fetch.SOURCES["cifar10"]
    r = src.files[0]
    monkeypatch.setitem(fetch.SOURCES, "cifar10", fetch.Source(
        (fetch.Remote(r.name, r.urls, _md5(mirror / r.name)),), src.target, src.doc))


def _trust_mirror_mnist_only(monkeypatch, mirror):
    src = fetch.SOURCES["mnist"]
    monkeypatch.setitem(fetch.SOURCES, "mnist", fetch.Source(
        tuple(fetch.Remote(r.name, r.urls, _md5(mirror / r.name)) for r in src.files), src.target, src.doc))
