"""Extreme-classification data: the XMLRepo text reader (good and malformed files), the shipped
Bibtex split, the seeded Amazon/Wiki-shaped generator, caching and the dataset configs."""
from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.config import apply_small_preset
from pipeline.data import xc, xc_dataset, xc_synth
from pipeline.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[1]
BIBTEX = ROOT / "data" / "bibtex"


def reference_parse(text: str):
    """Plain-Python reading of the format (the test's independent oracle)."""
    lines = text.replace("\r\n", "\n").split("\n")
    N, F, L = (int(t) for t in lines[0].split())
    X = np.zeros((N, F), np.float64)
    Y = np.zeros((N, L), np.float32)
    for i, line in enumerate(lines[1:1 + N]):
        head, _, rest = line.partition(" ")
        if ":" in head:                  # a row without labels and without its leading space
            head, rest = "", line
        for t in filter(None, head.split(",")):
            Y[i, int(t)] = 1
        for t in rest.split():
            f, v = t.split(":")
            X[i, int(f)] += float(v)
    return X.astype(np.float32), Y, F, L


GOOD = ("6 12 7\r\n"
        "0,3 1:0.5 4:1.25 11:3\r\n"
        " 2:0.125 5:1e-3 7:-2.5E+1\n"       # no labels: starts with a space
        "6,1,1 9:2 3:1 9:0.5\n"              # unsorted ids, a repeated label, a repeated feature
        "2\n"                                 # labels, no features
        " \n"                                 # neither
        "5 0:12345.678 10:.5 8:7.\n")


def write(path: Path, text: str) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def assert_canonical(s: xc.XCSplit):
    for M in (s.X, s.Y):
        assert M.dtype == np.float32 and M.has_canonical_format
        assert np.all(np.diff(M.indptr) >= 0)
        c = M.copy()
        c.has_canonical_format = False
        c.sum_duplicates()
        assert c.nnz == M.nnz
    assert np.all(s.Y.data == 1.0)


# ------------------------------------------------------------------------------------ reader

@pytest.mark.parametrize("name", ["good.txt", "good.txt.gz", "good.data"])
def test_reads_good_file_plain_and_gzip(tmp_path, name):
    s, F, L = xc.read_xc(write(tmp_path / name, GOOD))
    X, Y, F0, L0 = reference_parse(GOOD)
    assert (F, L) == (F0, L0) == (12, 7)
    assert s.X.shape == (6, 12) and s.Y.shape == (6, 7)
    np.testing.assert_array_equal(s.X.toarray(), X)
    np.testing.assert_array_equal(s.Y.toarray(), Y)
    assert_canonical(s)
    st = s.stats()
    assert st["rows_without_labels"] == 2 and st["max_labels_per_row"] == 2
    assert s.X[3].nnz == 0 and s.Y[3].nnz == 1      # a row with labels only is kept
    assert s.X[4].nnz == 0 and s.Y[4].nnz == 0      # and so is an empty one


def test_gzip_detected_by_content(tmp_path):
    p = tmp_path / "noext"
    with gzip.open(p, "wt") as f:
        f.write(GOOD)
    s, _, _ = xc.read_xc(p)
    assert s.n == 6


def test_values_exact_as_python_float(tmp_path):
    rng = np.random.default_rng(3)
    vals = np.concatenate([rng.random(300) * 10.0 ** rng.integers(-8, 8, 300), rng.random(50)])
    toks = [f"{v:.{d}f}" for v, d in zip(vals, rng.integers(0, 12, vals.size))] + \
           [f"{v:.7e}" for v in vals[:40]] + [f"-{v:g}" for v in vals[40:80]] + ["0", "00012.5000", "+3.25"]
    text = f"1 {len(toks)} 1\n0 " + " ".join(f"{i}:{t}" for i, t in enumerate(toks)) + "\n"
    s, _, _ = xc.read_xc(write(tmp_path / "v.txt", text))
    want = np.array([float(t) for t in toks], np.float64).astype(np.float32)
    got = s.X.toarray()[0]
    assert np.array_equal(got[want != 0], want[want != 0])


def test_every_token_shape_parses_as_python_does(tmp_path):
    """Lengths 1..14, every position of the '.', leading zeros: the word-at-a-time fast path and
    the fallbacks agree with Python's float (values) and int (ids)."""
    rng = np.random.default_rng(5)
    vals, ids = [], []
    for length in range(1, 15):
        for dot in [None, *range(length)]:
            for _ in range(3):
                digits = "".join(rng.choice(list("0123456789"), length - (dot is not None)))
                if dot is None:
                    vals.append(digits)
                    if length <= 9:
                        ids.append(digits)
                elif length > 1:
                    vals.append(digits[:dot] + "." + digits[dot:])
    F = 10 ** 9
    feats = sorted({int(t) for t in ids})
    text = (f"2 {F} 1\n0 " + " ".join(f"{i}:{t}" for i, t in enumerate(vals)) + "\n"
            + "0 " + " ".join(f"{t}:1" for t in ids) + "\n")
    s, _, _ = xc.read_xc(write(tmp_path / "shapes.txt", text))
    row = s.X[0]
    want = np.array([float(t) for t in vals]).astype(np.float32)
    got = np.zeros(len(vals), np.float32)
    got[row.indices] = row.data
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(s.X[1].indices, feats)


@pytest.mark.parametrize("block", [64, 257, 1 << 20])
def test_round_trip_random_split_any_block_size(tmp_path, block):
    rng = np.random.default_rng(block)
    n, F, L = 300, 5000, 900
    X = sp.random(n, F, density=0.01, format="csr", dtype=np.float32, random_state=1)
    X.data[:] = rng.integers(1, 4096, X.nnz) / 64.0        # exactly printable values
    Y = sp.random(n, L, density=0.004, format="csr", dtype=np.float32, random_state=2)
    Y.data[:] = 1
    src = xc.XCSplit(X, Y)
    p = tmp_path / "r.txt.gz"
    xc.write_xc(p, src, fmt="%.6f")
    s, F2, L2 = xc.read_xc(p, block_bytes=block)
    assert (F2, L2) == (F, L)
    assert (s.X != X).nnz == 0 and (s.Y != Y).nnz == 0
    assert np.diff(Y.indptr).min() == 0                     # some rows without labels went through


def test_byte_order_mark_skipped(tmp_path):
    p = tmp_path / "bom.txt"
    p.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    s, F, L = xc.read_xc(p)
    assert (s.n, F, L) == (6, 12, 7)


def test_trailing_blank_lines_ignored(tmp_path):
    s, _, _ = xc.read_xc(write(tmp_path / "t.txt", "2 4 3\n0 1:1\n1 2:1\n\n\n"))
    assert s.n == 2


MALFORMED = [
    ("no header", "0,1 0:1.5 3:2\n", 1, "is not 'N F L'"),
    ("two numbers", "3 10\n0 1:1\n", 1, "is not 'N F L'"),
    ("word in header", "3 10 x\n", 1, "is not 'N F L'"),
    ("empty file", "", 1, "is not 'N F L'"),
    ("zero labels", "1 10 0\n 1:1\n", 1, "must be >= 1"),
    ("too few rows", "3 10 5\n0 1:1\n", 1, "declares 3 rows but the file has 1"),
    ("too many rows", "1 10 5\n0 1:1\n1 2:1\n", 1, "declares 1 rows but the file has more"),
    ("label >= L", "2 10 5\n0 1:1\n5 2:1\n", 3, "label id 5 >= L=5"),
    ("feature >= F", "2 10 5\n0 1:1\n1 10:1\n", 3, "feature id 10 >= F=10"),
    ("negative label", "2 10 5\n0 1:1\n-1 2:1\n", 3, "negative label id"),
    ("negative feature", "2 10 5\n0 1:1\n1 -2:1\n", 3, "negative feature id"),
    ("word value", "2 10 5\n0 1:1\n1 2:abc\n", 3, "'abc' is not a number"),
    ("word feature", "2 10 5\n0 1:1\n1 x:1\n", 3, "feature id 'x' is not a non-negative integer"),
    ("float label", "2 10 5\n0 1:1\n1.0 3:1\n", 3, "label id '1.0' is not a non-negative integer"),
    ("NaN", "3 10 5\n0 1:1\n1 2:1\n1 2:nan\n", 4, "'nan' is not finite"),
    ("inf", "2 10 5\n0 1:1\n1 2:-inf\n", 3, "'-inf' is not finite"),
    ("float32 overflow", "2 10 5\n0 1:1\n1 2:1e60\n", 3, "not finite in float32"),
    ("empty label", "2 10 5\n0 1:1\n1,,2 2:1\n", 3, "stray ','"),
    ("empty value", "2 10 5\n0 1:1\n1 2: 3:1\n", 3, "stray ':'"),
    ("bare token", "2 10 5\n0 1:1\n1 2 3:1\n", 3, "token '2' is neither a label"),
    ("label after features", "2 10 5\n0 1:1\n 3:1 4\n", 3, "token '4' is neither a label"),
    ("two colons", "2 10 5\n0 1:1\n1 3:1:2\n", 3, "is neither a label"),
    ("two dots", "2 10 5\n0 1:1\n1 3:1.2.3\n", 3, "'1.2.3' is not a number"),
    ("lone dot", "2 10 5\n0 1:1\n1 3:.\n", 3, "'.' is not a number"),
    ("dotted id", "2 10 5\n0 1:1\n1 3.0:1\n", 3, "feature id '3.0' is not a non-negative integer"),
    ("huge id", "2 10 5\n0 1:1\n1 99999999999999999999999:1\n", 3, "feature id 99999999999999999999999 >= F=10"),
]


@pytest.mark.parametrize("what,text,line,needle", MALFORMED, ids=[m[0] for m in MALFORMED])
@pytest.mark.parametrize("suffix", [".txt", ".txt.gz"])
def test_malformed_one_line_error_and_nothing_cached(tmp_path, what, text, line, needle, suffix):
    p = write(tmp_path / f"bad{suffix}", text)
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as e:
        xc.read_xc_cached(p, str(cache))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{p}:{line}: "), msg
    assert needle in msg, msg
    assert not cache.exists() or not any(cache.iterdir())


def test_error_line_number_in_a_later_block(tmp_path):
    rows = [f"{i % 5} {i % 7}:1 {7 + i % 3}:0.5" for i in range(400)]
    rows[333] = "1 2:1 3:oops"
    p = write(tmp_path / "late.txt", "400 10 5\n" + "\n".join(rows) + "\n")
    for block in (50, 1000, 1 << 20):
        with pytest.raises(DataError, match=rf"^{p}:335: value 'oops' is not a number"):
            xc.read_xc(p, block_bytes=block)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        xc.read_xc(tmp_path / "nope.txt")


def test_truncated_gzip_is_a_data_error(tmp_path):
    p = write(tmp_path / "full.txt.gz", "3 10 5\n" + "0 1:1\n" * 3)
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(p.read_bytes()[:-12])
    with pytest.raises(DataError, match=str(cut)):
        xc.read_xc(cut)


def test_real_file_cache_keyed_by_size_and_mtime(tmp_path, monkeypatch):
    p = write(tmp_path / "c.txt", "2 10 5\n0 1:1\n1 2:1\n")
    cache = tmp_path / "cache"
    calls = []
    real = xc.read_xc
    monkeypatch.setattr(xc, "read_xc", lambda path, *a, **k: calls.append(path) or real(path, *a, **k))
    a, _, _ = xc.read_xc_cached(p, str(cache))
    b, _, _ = xc.read_xc_cached(p, str(cache))
    assert len(calls) == 1 and (a.X != b.X).nnz == 0 and (a.Y != b.Y).nnz == 0
    write(p, "2 10 5\n0 1:1\n1 2:1 3:4\n")
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    c, _, _ = xc.read_xc_cached(p, str(cache))
    assert len(calls) == 2 and c.X.nnz == 3


# ------------------------------------------------------------------------------------ bibtex

def test_bibtex_shapes_and_statistics():
    tr, F, L = xc.read_xc(BIBTEX / "bibtex_train.txt.gz")
    te, F2, L2 = xc.read_xc(BIBTEX / "bibtex_test.txt.gz")
    assert (F, L) == (F2, L2) == (1836, 159)
    assert tr.X.shape == (4880, 1836) and tr.Y.shape == (4880, 159)
    assert te.X.shape == (2515, 1836) and te.Y.shape == (2515, 159)
    assert tr.Y.nnz / tr.n == pytest.approx(2.394, abs=5e-4)
    assert te.Y.nnz / te.n == pytest.approx(2.418, abs=5e-4)
    assert tr.X.nnz / tr.n == pytest.approx(68.58, abs=5e-3)
    assert np.all(tr.X.data == 1.0)
    both = np.union1d(tr.Y.indices, te.Y.indices)
    assert both.size == 159
    assert tr.stats()["rows_without_labels"] == 0
    assert_canonical(tr)
    assert_canonical(te)


# ------------------------------------------------------------------------------------ generator

SMALL = xc_synth.Spec(features=2000, labels=5000, train_rows=4000, test_rows=1000,
                      nnz_per_row=76.0, labels_per_row=5.45)


@pytest.fixture(scope="module")
def small():
    return xc_synth.generate(SMALL, seed=7)


def test_generator_shapes_and_statistics(small):
    tr, te = small
    assert tr.X.shape == (4000, 2000) and tr.Y.shape == (4000, 5000)
    assert te.X.shape == (1000, 2000) and te.Y.shape == (1000, 5000)
    for s in (tr, te):
        assert_canonical(s)
        st = s.stats()
        assert st["nnz_per_row"] == pytest.approx(76, rel=0.03)
        assert st["labels_per_row"] == pytest.approx(5.45, rel=0.04)
        assert np.all(s.X.data > 0)
        np.testing.assert_allclose(sp.linalg.norm(s.X, axis=1), 1.0, rtol=1e-5)
    empty = tr.stats()["rows_without_labels"]
    assert 1 <= empty <= 40                                  # a few rows without labels
    counts = np.diff(tr.X.indptr)
    assert counts.std() > 1.5 * np.sqrt(counts.mean())       # over-dispersed, not a flat count
    assert counts.min() >= 1


def test_generator_label_frequencies_follow_a_power_law(small):
    tr, _ = small
    f = np.sort(np.bincount(tr.Y.indices, minlength=SMALL.labels))[::-1].astype(float)
    assert f[0] > 20 * np.median(f)                           # a heavy head, a long tail
    r = np.arange(1, 201)
    slope = np.polyfit(np.log(r), np.log(f[:200]), 1)[0]     # log-log slope of the head ~ -zipf
    assert -1.0 < slope < -0.35
    # ids are not in frequency order
    top = np.argsort(-np.bincount(tr.Y.indices, minlength=SMALL.labels))[:20]
    assert not np.array_equal(np.sort(top), np.arange(20))


def test_generator_is_deterministic_by_seed(small):
    again = xc_synth.generate(SMALL, seed=7)
    other = xc_synth.generate(SMALL, seed=8)
    for a, b in zip(small, again):
        assert (a.X != b.X).nnz == 0 and (a.Y != b.Y).nnz == 0
        assert np.array_equal(a.X.data, b.X.data)
    assert (small[0].Y != other[0].Y).nnz > 0
    serial = xc_synth.generate_split(SMALL, 7, "test", workers=1)
    threaded = xc_synth.generate_split(SMALL, 7, "test", workers=3)
    assert (serial.X != small[1].X).nnz == 0 and (threaded.X != small[1].X).nnz == 0
    assert (serial.Y != threaded.Y).nnz == 0


def test_scaled_rows_are_a_prefix():
    spec = xc_synth.Spec(features=500, labels=300, train_rows=2 * xc_synth.BLOCK_ROWS + 100, test_rows=50,
                         nnz_per_row=20, labels_per_row=3)
    full = xc_synth.generate_split(spec, 1, "train")
    part = xc_synth.generate_split(spec, 1, "train", rows=xc_synth.BLOCK_ROWS + 17)
    n = part.n
    assert (full.X[:n] != part.X).nnz == 0 and (full.Y[:n] != part.Y).nnz == 0


def test_planted_structure_is_learnable(small):
    """A trivial one-vs-rest classifier (cosine to each label's summed training rows) beats the
    best constant prediction (the most frequent training label) by a wide margin on test rows."""
    from sklearn.preprocessing import normalize
    tr, te = small
    centroids = normalize((tr.Y.T @ tr.X).tocsr()).toarray()          # (L, F)
    top = np.asarray(te.X @ centroids.T).argmax(1)
    p1 = float(np.asarray(te.Y[np.arange(te.n), top]).mean())
    const = int(np.argmax(np.bincount(tr.Y.indices, minlength=SMALL.labels)))
    p1_const = float(te.Y[:, const].toarray().mean())
    assert p1 > 0.5 and p1 > 5 * p1_const, (p1, p1_const)
    # and the labels really come from the features: shuffled test features are not predictable
    perm = np.random.default_rng(0).permutation(te.n)
    top_shuf = np.asarray(te.X[perm] @ centroids.T).argmax(1)
    assert float(np.asarray(te.Y[np.arange(te.n), top_shuf]).mean()) < p1 / 4


# ------------------------------------------------------------------------------------ configs, load

def _dcfg(compose, *overrides):
    return compose([*overrides]).dataset


@pytest.mark.parametrize("name", ["bibtex", "amazon670k", "wiki325k", "slide_default"])
def test_dataset_configs_compose_and_check(compose, name):
    from pipeline.config.xc import check_xc_dataset
    cfg = compose([f"dataset={name}"])
    check_xc_dataset(cfg)
    assert cfg.dataset.format == "xc"
    if name == "slide_default":
        assert cfg.dataset.name == "amazon670k" and cfg.dataset.labels == 670091


@pytest.mark.parametrize("name", ["amazon670k", "wiki325k"])
def test_generated_dataset_configs_carry_the_published_shapes(compose, name):
    d = compose([f"dataset={name}"]).dataset
    for key, value in xc_synth.SHAPES[name].items():
        assert d[key] == value, key
    spec, tr, te, _ = xc_synth.spec_from_cfg(d)
    assert (spec.features, spec.labels, tr, te) == (d.features, d.labels, d.train_rows, d.test_rows)


@pytest.mark.parametrize("name", ["amazon670k", "wiki325k"])
def test_small_preset_is_the_dataset_small_block(compose, name):
    """size=small: dataset.small replaces the generator's shape (the set generated and cached
    before the block existed: 2000 features, 5000 labels, 4000 / 1000 rows, the full set's
    densities) and says so in one line; a dataset.scale typed is not used there."""
    cfg = compose([f"dataset={name}", "dataset.scale=0.5"])
    line = apply_small_preset(cfg, "dataset")
    spec, tr, te, shrunk = xc_synth.spec_from_cfg(cfg.dataset)
    assert (spec.features, spec.labels, tr, te, shrunk) == (2000, 5000, 4000, 1000, "")
    assert spec.nnz_per_row == xc_synth.SHAPES[name]["nnz_per_row"]
    assert line == ("size=small: dataset features=2000 labels=5000 train_rows=4000 test_rows=1000 scale=1.0 "
                    "(dataset.small; dataset.small=null keeps the full settings)")


@pytest.mark.parametrize("override,key", [
    ("dataset.scale=0", "dataset.scale"), ("dataset.zipf=-1", "dataset.zipf"),
    ("dataset.kind=maybe", "dataset.kind"), ("dataset.signal=1.5", "dataset.signal"),
    ("dataset.train_rows=0", "dataset.train_rows"), ("dataset.labels_per_row=0.5", "dataset.labels_per_row"),
    ("dataset.nnz_per_row=200000", "dataset.nnz_per_row"), ("dataset.empty_rows=1", "dataset.empty_rows"),
])
def test_bad_generator_keys_are_one_line_config_errors(compose, override, key):
    from pipeline.config.xc import check_xc_dataset
    with pytest.raises(ConfigError) as e:
        check_xc_dataset(compose(["dataset=amazon670k", override]))
    assert str(e.value).startswith(f"{key}=") and "\n" not in str(e.value)


def test_non_xc_dataset_is_rejected(compose):
    from pipeline.config.xc import check_xc_dataset
    with pytest.raises(ConfigError, match="model=slide"):
        check_xc_dataset(compose(["dataset=a9a"]), model="slide")


def test_unknown_key_rejected_by_schema(compose):
    with pytest.raises(Exception, match="no_such_key"):
        compose(["dataset=amazon670k", "dataset.no_such_key=1"])


def test_load_bibtex_real(compose, tmp_path):
    cfg = compose(["dataset=bibtex"])
    notes = []
    d = xc_dataset.load(cfg.dataset, data_dir=str(tmp_path / "elsewhere"), cache_dir=str(tmp_path / "c"),
                size="small", seed=0, notice=notes.append)
    assert d.source.startswith("real: ") and d.train.n == 4880 and d.test.n == 2515
    assert (d.n_features, d.n_labels) == (1836, 159) and d.max_labels_per_row >= 2
    assert notes and "used whole" in notes[0]
    assert len(list((tmp_path / "c").glob("xc-bibtex_*.npz"))) == 2


def test_load_generated_small_and_cache(compose, tmp_path, monkeypatch):
    cfg = compose(["dataset=amazon670k", "dataset.small.train_rows=600", "dataset.small.test_rows=200"])
    apply_small_preset(cfg, "dataset")
    notes = []
    d = xc_dataset.load(cfg.dataset, data_dir=str(tmp_path), cache_dir=str(tmp_path / "c"), size="small", seed=3,
                notice=notes.append)
    assert d.source.startswith("generated: 600+200 rows, 2000 features") and d.train.n == 600 and d.test.n == 200
    assert (d.n_features, d.n_labels) == (2000, 5000) and not notes
    monkeypatch.setattr(xc_synth, "generate", lambda *a, **k: pytest.fail("regenerated despite the cache"))
    again = xc_dataset.load(cfg.dataset, data_dir=str(tmp_path), cache_dir=str(tmp_path / "c"), size="small", seed=3,
                    notice=notes.append)
    assert (again.train.X != d.train.X).nnz == 0 and (again.test.Y != d.test.Y).nnz == 0


def test_load_generated_full_shape_scaled(compose, tmp_path):
    cfg = compose(["dataset=wiki325k", "dataset.scale=0.002"])
    notes = []
    d = xc_dataset.load(cfg.dataset, data_dir=str(tmp_path), cache_dir=None, size="full", seed=0, notice=notes.append)
    assert (d.n_features, d.n_labels) == (1617899, 325056)
    assert d.train.n == round(1778351 * 0.002) and d.test.n == round(587084 * 0.002)
    assert d.train.stats()["nnz_per_row"] == pytest.approx(42.5, rel=0.05)
    assert d.train.stats()["labels_per_row"] == pytest.approx(3.2, rel=0.06)
    assert any("no real files" in n for n in notes)


def _xc_pair(folder: Path, F: int, L: int):
    folder.mkdir(parents=True, exist_ok=True)
    write(folder / "train.txt", f"2 {F} {L}\n0,1 0:1\n 1:2\n")
    write(folder / "test.txt.gz", f"1 {F} {L}\n1 1:1\n")


def test_load_real_files_found_in_data_dir_or_given_path(compose, tmp_path):
    _xc_pair(tmp_path / "amazon670k", 135909, 670091)
    cfg = compose(["dataset=amazon670k", "dataset.test=test.txt.gz"])
    d = xc_dataset.load(cfg.dataset, data_dir=str(tmp_path), cache_dir=None, size="full", seed=0, notice=lambda m: None)
    assert d.source == f"real: {tmp_path / 'amazon670k'}" and d.train.n == 2 and d.test.n == 1
    _xc_pair(tmp_path / "mine", 50, 4)
    cfg = compose(["dataset=wiki325k", f"dataset.path={tmp_path / 'mine'}", "dataset.test=test.txt.gz",
                   "dataset.features=0", "dataset.labels=0"])
    d = xc_dataset.load(cfg.dataset, data_dir=str(tmp_path / "none"), cache_dir=None, size="full", seed=0)
    assert (d.n_features, d.n_labels) == (50, 4)
    cfg = compose(["dataset=amazon670k", "dataset.test=test.txt.gz"])
    apply_small_preset(cfg, "dataset")
    notes = []
    d = xc_dataset.load(cfg.dataset, data_dir=str(tmp_path), cache_dir=None, size="small", seed=0,
                        notice=notes.append)                       # the data_dir folder: size=full only
    assert d.source.startswith("generated: ") and d.n_labels == 5000 and notes == [
        f"dataset amazon670k: size=small does not read the real files in {tmp_path / 'amazon670k'} (size=full does)"]


def test_a_named_folder_on_size_small_keeps_its_first_rows(compose, tmp_path):
    """A dataset.path folder is read on size=small too: its header's shape (dataset.features / labels
    are the small preset's generated shape there), the first dataset.small.train_rows / test_rows rows,
    said in one line; size=full reads them whole."""
    folder = tmp_path / "mine"
    folder.mkdir()
    write(folder / "train.txt", "3 135909 670091\n0 0:1\n1 1:1\n2 2:1\n")
    write(folder / "test.txt", "2 135909 670091\n0 0:1\n1 1:1\n")
    cfg = compose(["dataset=amazon670k", f"dataset.path={folder}", "dataset.small.train_rows=2"])
    apply_small_preset(cfg, "dataset")
    notes = []
    d = xc_dataset.load(cfg.dataset, data_dir=str(tmp_path), cache_dir=None, size="small", seed=0, notice=notes.append)
    assert (d.train.n, d.test.n, d.n_features, d.n_labels) == (2, 2, 135909, 670091)
    assert d.source == f"real: {folder}, first 2 / 2 rows" and (d.train.Y.indices == [0, 1]).all()
    assert notes == [f"dataset.path={folder}: the CPU preset (size=small) trains on the first 2 of the 3 rows of "
                     f"train.txt and evaluates on the first 2 of the 2 rows of test.txt (dataset.small.train_rows / "
                     f"test_rows; size=full uses all)"]
    whole = xc_dataset.load(compose(["dataset=amazon670k", f"dataset.path={folder}"]).dataset, data_dir=str(tmp_path),
                            cache_dir=None, size="full", seed=0)
    assert (whole.train.n, whole.test.n) == (3, 2)
    cfg = compose(["dataset=amazon670k", f"dataset.path={folder}", "dataset.small.train_rows=5"])
    apply_small_preset(cfg, "dataset")
    notes = []
    d = xc_dataset.load(cfg.dataset, data_dir=str(tmp_path), cache_dir=None, size="small", seed=0, notice=notes.append)
    assert (d.train.n, d.test.n) == (3, 2) and "used whole on size=small" in notes[0]


def test_load_real_errors(compose, tmp_path):
    cfg = compose(["dataset=amazon670k", f"dataset.path={tmp_path / 'absent'}"])
    with pytest.raises(DataError, match="dataset.path=.*no such folder"):
        xc_dataset.load(cfg.dataset, data_dir=str(tmp_path), cache_dir=None, size="full", seed=0)
    _xc_pair(tmp_path / "mine", 50, 4)
    cfg = compose(["dataset=amazon670k", f"dataset.path={tmp_path / 'mine'}"])
    with pytest.raises(DataError, match=r"test.txt: missing file of dataset 'amazon670k'"):
        xc_dataset.load(cfg.dataset, data_dir=str(tmp_path), cache_dir=None, size="full", seed=0)
    cfg = compose(["dataset=amazon670k", f"dataset.path={tmp_path / 'mine'}", "dataset.test=test.txt.gz"])
    with pytest.raises(DataError, match=r"train.txt:1: header declares 50 features but dataset.features=135909"):
        xc_dataset.load(cfg.dataset, data_dir=str(tmp_path), cache_dir=None, size="full", seed=0)
    write(tmp_path / "mine" / "test2.txt", "1 50 5\n1 1:1\n")
    cfg = compose(["dataset=amazon670k", f"dataset.path={tmp_path / 'mine'}", "dataset.test=test2.txt",
                   "dataset.features=0", "dataset.labels=0"])
    with pytest.raises(DataError, match="both files of a dataset must agree"):
        xc_dataset.load(cfg.dataset, data_dir=str(tmp_path), cache_dir=None, size="full", seed=0)
