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


# ------------------------------------------------------------------------------------ HPEC

FULL4 = "".join(f"{i}\t{i}\t0.5\n" for i in range(1, 5))      # a complete N=4 layer


def test_hpec_layer_value_beyond_float32(tmp_path):
    from pipeline.data import hpec
    p = tmp_path / "n4-l1.tsv"
    p.write_text(FULL4 + "1\t2\t1e39\n")                       # was inf in float32, silently
    raises(lambda: hpec.read_layer_tsv(p, 4), f"{p}:5:", "'1e39'", "float32")


def test_hpec_images_duplicate_pixel(tmp_path):
    from pipeline.data import hpec
    p = tmp_path / "sparse-images-4.tsv"
    p.write_text("1\t1\t1\n2\t3\t1\n1\t1\t1\n")                # was summed into a 2, silently
    raises(lambda: hpec.read_images_tsv(p, 4), f"{p}:3:", "duplicate entry (1, 1)")


def test_hpec_images_prefix(tmp_path):
    from pipeline.data import hpec
    p = tmp_path / "sparse-images-4.tsv"
    p.write_text("1\t1\t1\n3\t2\t1\n2\t4\t1\n")
    assert hpec.read_images_tsv(p, 4).toarray().tolist() == [[1, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0]]
    assert hpec.read_images_tsv(p, 4, 2).toarray().tolist() == [[1, 0, 0, 0], [0, 0, 0, 1]]
    assert hpec.read_images_tsv(p, 4, 4).shape == (4, 4)


def test_hpec_tsv_broken_layer_caches_nothing(tmp_path):
    from pipeline.data import hpec
    d, cache = tmp_path / "tsv", tmp_path / "cache"
    d.mkdir()
    (d / "n4-l1.tsv").write_text(FULL4 + "2\t3\t1e39\n")
    (d / "sparse-images-4.tsv").write_text("1\t1\t1\n2\t3\t1\n")
    raises(lambda: hpec.load_tsv(d, 4, 1, cache_dir=str(cache)), d / "n4-l1.tsv")
    assert not cache.exists() or not any(cache.iterdir())
    (d / "n4-l1.tsv").write_text(FULL4 + "2\t3\t7\n")
    net = hpec.load_tsv(d, 4, 1, cache_dir=str(cache))
    assert net.layers[0][1, 2] == 7


HPEC_NPZ = Path(__file__).resolve().parents[1] / "data" / "hpec-1024"


def _hpec_arrays():
    from pipeline.data import hpec
    if not (HPEC_NPZ / "weights.npz").is_file():
        pytest.skip(f"the packaged subset is not in {HPEC_NPZ}")
    return {f: hpec._npz(HPEC_NPZ / f) for f in ("weights.npz", "inputs.npz", "categories.npz")}


def _flat_set(a: np.ndarray, i: int, v) -> np.ndarray:
    a = a.copy()
    a.reshape(-1)[i] = v
    return a


@pytest.mark.parametrize("file, change, words", [
    ("inputs.npz", lambda a: a.pop("shape"), ["key 'shape' is missing"]),                      # was KeyError
    ("categories.npz", lambda a: a.pop("subset"), ["key 'subset' is missing"]),
    ("inputs.npz", lambda a: a.update(image=a["image"] + 5000), ["image 5000", "outside 0..1199"]),  # was ValueError
    ("inputs.npz", lambda a: a.update(pixel=_flat_set(a["pixel"], 7, -1)), ["entry 7 has pixel -1"]),
    ("inputs.npz", lambda a: a.update(val=_flat_set(a["val"], 3, np.nan)), ["'val' holds nan"]),
    ("weights.npz", lambda a: a.update(val=_flat_set(a["val"], 3, np.inf)), ["'val' holds inf"]),
    ("weights.npz", lambda a: a.update(bias=np.array(np.nan)), ["'bias' holds nan"]),
    ("inputs.npz", lambda a: a.update(val=a["val"][:-1]), ["lengths", "differ"]),
    ("inputs.npz", lambda a: a.update(shape=np.array([1200])), ["'shape' is [1200]"]),          # was IndexError
    ("weights.npz", lambda a: a.update(N=np.array([1024, 2])), ["'N'", "0-d integer"]),         # was TypeError
    ("weights.npz", lambda a: a.update(L=np.array(0), row=a["row"][:0], col=a["col"][:0], val=a["val"][:0]),
     ["L=0 layers"]),                                                                           # was 0 layers
    ("weights.npz", lambda a: a.update(col=_flat_set(a["col"], 1, a["col"][0, 0]), row=_flat_set(a["row"], 1, a["row"][0, 0])),
     ["layer 1 entry 1: duplicate entry"]),                                                     # was summed
    ("categories.npz", lambda a: a.update(subset=a["subset"] + 5000), ["'subset' entry 0"]),     # was kept
    ("categories.npz", lambda a: a.update(subset=a["subset"] + 0.5), ["'subset'", "float64"]),
], ids=["no-shape", "no-subset", "image-range", "pixel-negative", "inputs-nan", "weights-inf", "bias-nan",
        "lengths", "shape-1d", "N-array", "no-layers", "duplicate", "subset-range", "subset-float"])
def test_hpec_npz_malformed(tmp_path, file, change, words):
    from pipeline.data import hpec
    arrays = _hpec_arrays()
    change(arrays[file])
    for f, a in arrays.items():
        with open(tmp_path / f, "wb") as fh:
            np.savez(fh, **a)
    raises(lambda: hpec.load_npz(tmp_path, L=1 if file != "categories.npz" else 0), tmp_path / file, *words)


def test_hpec_npz_directory_for_a_file(tmp_path):
    from pipeline.data import hpec
    (tmp_path / "weights.npz").mkdir()
    raises(lambda: hpec.load_npz(tmp_path), tmp_path / "weights.npz", "is a directory")


# ------------------------------------------------------------------------------------ svmlight

@pytest.mark.parametrize("name, data, words", [
    ("a.gz", b"1 1:1\n", ["cannot be read", "Not a gzipped file"]),                     # was BadGzipFile
    ("a.gz", gzip.compress(b"1 1:1 2:1\n" * 5000)[:-30], ["cannot be read", "EOFError"]),  # was EOFError
    ("a.gz", corrupt_gzip(b"1 1:1 2:1\n" * 5000), ["cannot be read"]),                    # was zlib.error
    ("a", b"1 1:1\n0 2:1e39\n", [":2:", "'1e39'", "float32"]),                           # had no line
    ("a", b"1 1:1\n0 3000000000:1\n", [":2:", "3000000000", "int32"]),                    # had no line
    ("a", b"", ["no samples"]),                                                          # was 0 rows
    ("a", b"# only a comment\n", ["no samples"]),
], ids=["not-gzip", "truncated-gzip", "damaged-gzip", "float32", "int32-id", "empty", "comments-only"])
def test_svmlight_malformed(tmp_path, name, data, words):
    from pipeline.data import svmlight
    p = tmp_path / name
    p.write_bytes(data)
    raises(lambda: svmlight.load(p), p, *words)


def test_svmlight_directory(tmp_path):
    from pipeline.data import svmlight
    raises(lambda: svmlight.load(tmp_path), tmp_path, "is a directory")


# ------------------------------------------------------------------------------------ click logs

AVAZU_ROW = ("1,{click},14102100,1005,0,1fbe01fe,f3845767,28905ebd,ecad2386,7801e8d9,07d7df22,a99f214a,ddd2926e,"
             "44956a24,1,2,15706,320,50,1722,0,35,-1,79")


def _avazu(path: Path, rows) -> Path:
    from pipeline.data import ctr
    path.write_text(",".join(ctr.AVAZU_COLUMNS) + "\n" + "".join(AVAZU_ROW.format(click=c) + "\n" for c in rows))
    return path


CRITEO_ROWS = Path(__file__).resolve().parents[1] / "data" / "criteo-10k" / "criteo_train_8000.tsv.gz"


@pytest.mark.parametrize("which", ["val-empty", "val-blank-lines", "train-empty"])
def test_criteo_split_without_rows(compose, tmp_path, which):
    if not CRITEO_ROWS.is_file():
        pytest.skip(f"no {CRITEO_ROWS}")
    from pipeline.data import ctr
    d = tmp_path / "data" / "criteo-10k"
    d.mkdir(parents=True)
    good = b"".join(gzip.open(CRITEO_ROWS).readlines()[:40])
    tr, va = d / "criteo_train_8000.tsv.gz", d / "criteo_test_2000.tsv.gz"
    tr.write_bytes(gzip.compress(b"" if which == "train-empty" else good))
    va.write_bytes(gzip.compress(b"\n\n" if which == "val-blank-lines" else b"" if which == "val-empty" else good))
    cfg = compose(["model=wide_lr", "dataset=criteo10k", f"data_dir={tmp_path / 'data'}",
                   f"cache_dir={tmp_path / 'cache'}"])
    culprit = tr if which == "train-empty" else va
    raises(ctr.source(cfg)[1], culprit, "no rows (the file is empty)", "dataset 'criteo10k'")   # was 0 rows


def test_avazu_header_only(compose, tmp_path):
    from pipeline.data import ctr
    f = _avazu(tmp_path / "train.csv", [])
    cfg = compose(["model=wide_lr", "dataset=avazu", f"dataset.path={f}", f"cache_dir={tmp_path / 'cache'}"])
    raises(ctr.source(cfg)[1], f, "no rows after the header")


def test_click_log_directory(tmp_path):
    from pipeline.data import ctr
    raises(lambda: ctr.read(tmp_path, ctr.layout_of({"format": "criteo"}), 1000), tmp_path, "is a directory")


@pytest.mark.slow
def test_cli_click_log_without_rows_then_fixed(cli, tmp_path):
    """At the CLI: `error: <file>: ...`, exit 2, no traceback, no cache entry; the fixed file runs."""
    f = _avazu(tmp_path / "train.csv", [])
    cache = tmp_path / "cache"
    args = ("model=wide_lr", "dataset=avazu", f"dataset.path={f}", "epochs=1", "backend=cpu", f"cache_dir={cache}")
    r = cli(*args, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    err = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert err == [f"error: {f}: no rows after the header: the avazu click log of dataset 'avazu' needs at "
                   f"least one sample line"], r.stderr              # was: the training split is empty (no file)
    assert "Traceback" not in r.stderr
    assert not cache.exists() or not any(p.name.startswith("wide-") for p in cache.iterdir())
    _avazu(f, [int(i % 3 == 0) for i in range(200)])
    r = cli(*args, timeout=120)
    assert r.returncode == 0 and "180 train / 20 val rows" in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------------------------------ XMLRepo

def test_xc_damaged_gzip(tmp_path):
    from pipeline.data import xc
    p = tmp_path / "train.txt"
    p.write_bytes(corrupt_gzip(b"3 5 2\n0 1:1\n1 2:1\n 3:1\n"))          # was zlib.error
    raises(lambda: xc.read_xc(p), p, "cannot be read")


# ------------------------------------------------------------------------------------ fetch

@pytest.mark.parametrize("where", ["data_dir", "target"])
def test_fetch_into_a_file(tmp_path, capsys, where):
    from pipeline.data import fetch
    data_dir = tmp_path / "data"
    if where == "data_dir":
        data_dir.write_text("x")                        # was a FileExistsError traceback
        culprit = data_dir
    else:
        data_dir.mkdir()
        culprit = data_dir / "mnist"
        culprit.write_text("x")
    rc = fetch.main(["mnist", "--data-dir", str(data_dir), "--mirror", (tmp_path / "mirror").as_uri()])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"error: {culprit}: cannot be a data folder") and err.count("\n") == 1, err


def test_a_file_rewritten_within_the_same_second_gets_a_new_cache_key(tmp_path):
    """Cached inputs (click logs, the wide models' data, XMLRepo text) are keyed by path, size and
    mtime in nanoseconds: a file rewritten at the same size within one second is not served the old entry."""
    import os
    from pipeline.data.cache import file_stamp, key
    f = tmp_path / "train.txt"
    f.write_text("1\t2\n")
    os.utime(f, ns=(1_700_000_000_100_000_000, 1_700_000_000_100_000_000))
    before = key({"train": file_stamp(f)})
    f.write_text("3\t4\n")
    os.utime(f, ns=(1_700_000_000_900_000_000, 1_700_000_000_900_000_000))
    assert key({"train": file_stamp(f)}) != before


def test_hpec_a_huge_index_is_shown_short_and_not_blamed_on_the_network_size(tmp_path):
    from pipeline.data import hpec
    f = tmp_path / "n1024-l1.tsv"
    f.write_text("1\t1\t0.0625\n1e300\t2\t0.0625\n")
    with pytest.raises(DataError) as e:
        hpec.read_layer_tsv(f, 1024)
    msg = str(e.value)
    assert f"{f}:2: neuron index 1e+300 is out of range 1..1024" in msg and "larger network" not in msg
    g = tmp_path / "sparse-images-1024.tsv"
    g.write_text("1\t1\t1\n1e300\t2\t1\n")
    with pytest.raises(DataError, match=r":2: image index 1e\+300 is out of range"):
        hpec.read_images_tsv(g, 1024)
