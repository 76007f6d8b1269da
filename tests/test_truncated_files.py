"""Files cut at a line (or record) boundary: each reader says which file is short and by what, in one
line, and caches nothing from it. Copies of the real small data, cut in tmp dirs."""
from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from omegaconf import OmegaConf

from pipeline.data import cifar10, hpec, mnist, xc
from pipeline.data.cache import cached_arrays
from test_data_errors import raises     # the DataError of fn(): one line holding every word

ROOT = Path(__file__).resolve().parents[1]
HPEC_NPZ = ROOT / "data" / "hpec-1024"
MNIST = Path(os.environ.get("PIPELINE_DATA_DIR", ROOT / "data")) / "mnist"


def cut(path: Path, lines: int) -> None:
    """Drop the last ``lines`` lines of a text file."""
    keep = path.read_text().splitlines(True)[:-lines]
    path.write_text("".join(keep))


# ------------------------------------------------------------------------------------ HPEC TSV

@pytest.fixture(scope="module")
def official(tmp_path_factory) -> Path:
    """Layers 1-2 of the official 1024-neuron network and its first 50 images, as the challenge's TSV."""
    if not (HPEC_NPZ / "weights.npz").is_file():
        pytest.skip(f"the packaged subset is not in {HPEC_NPZ}")
    net = hpec.load_npz(HPEC_NPZ, L=2, images=50)
    d = tmp_path_factory.mktemp("official")
    (d / "neuron1024").mkdir()
    for l, W in enumerate(net.layers, 1):
        hpec.write_tsv_layer(d / "neuron1024" / f"n1024-l{l}.tsv", W)
    coo = net.Y0.tocoo()
    (d / "sparse-images-1024.tsv").write_text("".join(f"{r + 1}\t{c + 1}\t1\n" for r, c in zip(coo.row, coo.col)))
    return d


@pytest.fixture
def copy(official, tmp_path) -> Path:
    shutil.copytree(official, tmp_path / "d")
    return tmp_path / "d"


@pytest.mark.parametrize("lines,left", [(10, 32758), (12780, 19988)])       # 10 lines, 39 %
def test_hpec_layer_cut_short_is_refused_and_not_cached(copy, tmp_path, lines, left):
    layer = copy / "neuron1024" / "n1024-l2.tsv"
    cut(layer, lines)
    cache = tmp_path / "cache"
    raises(lambda: hpec.load_tsv(copy, 1024, 2, cache_dir=str(cache)), layer,
           f"layer has {left} edges, expected 32768 (32 per neuron x 1024): the file is truncated")
    assert len(list(cache.glob("hpec-n1024-layer-*.npz"))) == 1        # layer 1 only
    assert not list(cache.glob("hpec-images*"))


def test_hpec_layer_with_a_neuron_short_of_edges(copy):
    layer = copy / "neuron1024" / "n1024-l1.tsv"
    lines = layer.read_text().splitlines(True)
    r = int(lines[-1].split()[0])                      # the last line is an edge into neuron 1024
    W = hpec.read_layer_tsv(layer, 1024)
    free = int(np.flatnonzero(W[r - 1].toarray()[0] == 0)[0])     # a neuron r has no edge into
    lines[-1] = f"{r}\t{free + 1}\t6.250000e-02\n"
    layer.write_text("".join(lines))
    raises(lambda: hpec.read_layer_tsv(layer, 1024), layer, f"neuron {free + 1} has 33 in-edges, expected 32")


def test_hpec_layer_cached_whole_then_cut_is_read_again(copy, tmp_path):
    cache = tmp_path / "cache"
    hpec.load_tsv(copy, 1024, 2, cache_dir=str(cache))
    layer = copy / "neuron1024" / "n1024-l1.tsv"
    cut(layer, 10)
    raises(lambda: hpec.load_tsv(copy, 1024, 2, cache_dir=str(cache)), layer, "32758 edges")


def test_hpec_layer_cached_by_the_unchecked_loader_is_not_trusted(copy, tmp_path):
    """An entry the loader cached from a cut layer before it checked edges (key: 'path:size:mtime_ns')."""
    cache = tmp_path / "cache"
    layer = copy / "neuron1024" / "n1024-l1.tsv"
    cut(layer, 10)
    st = layer.stat()
    tab = np.loadtxt(layer)
    W = sp.csr_matrix((tab[:, 2], (tab[:, 0] - 1, tab[:, 1] - 1)), shape=(1024, 1024), dtype=np.float32)
    cached_arrays(str(cache), "hpec-n1024-layer", {"file": f"{layer.resolve()}:{st.st_size}:{st.st_mtime_ns}"},
                  lambda: {"indptr": W.indptr, "indices": W.indices, "data": W.data})
    raises(lambda: hpec.load_tsv(copy, 1024, 1, cache_dir=str(cache)), layer, "32758 edges")


def _images_by_pixel(path: Path) -> int:
    """60000 images of two pixels each, sorted by pixel as the challenge's files are; the line count."""
    i = np.arange(1, hpec.IMAGES + 1)
    tab = np.r_[np.c_[i, i % 512 + 1], np.c_[i, i % 512 + 513]]
    tab = tab[np.lexsort((tab[:, 0], tab[:, 1]))]
    path.write_text("".join(f"{a}\t{b}\t1\n" for a, b in tab.tolist()))
    return len(tab)


def test_hpec_inputs_of_60000_images_cut_short(copy, tmp_path, monkeypatch):
    img = copy / "sparse-images-1024.tsv"
    monkeypatch.setitem(hpec.INPUT_NNZ, 1024, _images_by_pixel(img))      # Table 1's count, for this file
    assert hpec.read_images_tsv(img, 1024).shape == (60000, 1024)
    cut(img, 10)
    cache = tmp_path / "cache"
    raises(lambda: hpec.load_tsv(copy, 1024, 1, cache_dir=str(cache)), img,
           "119990 entries for 60000 images, expected 120000", "truncated")
    assert not list(cache.glob("hpec-images*"))


def test_hpec_golden_of_all_images_beside_inputs_cut_short(copy, monkeypatch):
    full = np.load(HPEC_NPZ / "categories.npz")["full"]        # the golden categories of all 60000 images
    monkeypatch.setitem(hpec.GOLDEN_COUNT, (1024, 1), full.size)  # (stands for 120 layers: 1 is faster)
    gold = copy / "neuron1024-l1-categories.tsv"
    gold.write_text("".join(f"{g + 1}\n" for g in full))
    img = copy / "sparse-images-1024.tsv"
    img.write_text("".join(f"{i}\t{i % 1024 + 1}\t1\n" for i in range(1, 60001)))     # one pixel an image
    cut(img, 10)
    raises(lambda: hpec.load_tsv(copy, 1024, 1), img, "has 59990 images", gold, "60000", "truncated")


# ------------------------------------------------------------------------------------ MNIST, CIFAR-10

@pytest.mark.parametrize("name,records", [("t10k-labels-idx1-ubyte.gz", 10000), ("t10k-images-idx3-ubyte.gz", 10000)])
def test_mnist_file_cut_at_a_record_boundary(tmp_path, name, records):
    if not (MNIST / name).is_file():
        pytest.skip(f"no {MNIST / name}")
    raw = gzip.decompress((MNIST / name).read_bytes())
    size = (len(raw) - 8 - (8 if "images" in name else 0)) // records
    p = tmp_path / name
    p.write_bytes(gzip.compress(raw[:len(raw) - 10 * size], compresslevel=1))
    raises(lambda: mnist.read_idx(p), p, f"({records - 10} whole records of {records})", "truncated",
           mnist.FETCH)


@pytest.mark.parametrize("split,name", [("train", "data_batch_3.bin"), ("test", "test_batch.bin")])
def test_cifar10_file_cut_at_a_record_boundary(tmp_path, split, name):
    d = tmp_path / "data" / cifar10.OFFICIAL
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for f in cifar10.BIN_FILES["train"] + cifar10.BIN_FILES["test"]:
        rec = rng.integers(0, 256, (4, cifar10.RECORD), dtype=np.uint8)
        rec[:, 0] %= 10
        (d / f).write_bytes(rec.tobytes())
    cfg = OmegaConf.create({"data_dir": str(tmp_path / "data"), "cache_dir": str(tmp_path / "cache")})
    assert cifar10.load(cfg, split)[1].size == 4 * len(cifar10.BIN_FILES[split])
    (d / name).write_bytes((d / name).read_bytes()[:3 * cifar10.RECORD])
    raises(lambda: cifar10.load(cfg, split), d / name, "3 records", "has 4", "truncated", cifar10.FETCH)


# ------------------------------------------------------------------------------------ XC text

def test_xc_file_cut_at_a_line_boundary(tmp_path):
    src = ROOT / "data" / "bibtex" / "bibtex_test.txt.gz"
    if not src.is_file():
        pytest.skip(f"no {src}")
    p = tmp_path / "bibtex_test.txt"
    p.write_bytes(gzip.decompress(src.read_bytes()))
    cut(p, 10)
    cache = tmp_path / "cache"
    raises(lambda: xc.read_xc_cached(p, str(cache)), p, "header declares 2515 rows but the file has 2505")
    assert not cache.exists() or not any(cache.iterdir())
