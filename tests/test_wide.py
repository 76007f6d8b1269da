"""CPU tests of the wide models (cuWide): readers, hashing, generator, preprocessing, reference
gradients, CLI on the CPU backend."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.errors import ConfigError, DataError
from pipeline.data import criteo, ctr_synth, svmlight
from pipeline.models.wide import prep
from pipeline.models.wide import reference as ref

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path, name, text, gz=False):
    p = tmp_path / name
    if gz:
        with gzip.open(p, "wt") as f:
            f.write(text)
    else:
        p.write_text(text)
    return p


# ------------------------------------------------------------------------------- svmlight

def test_a9a_real():
    X, y = svmlight.load(ROOT / "data/a9a/a9a.gz", 123)
    assert X.shape == (32560, 123) and X.dtype == np.float32
    assert set(np.unique(y)) == {0.0, 1.0} and int(y.sum()) == 7841
    assert abs(X.nnz / X.shape[0] - 13.87) < 0.01


def test_labels_pm1_and_empty_rows(tmp_path):
    p = write(tmp_path, "t.svm", "+1 1:0.5 3:2\n-1\n-1 2:1\n", gz=True)
    p = p.rename(tmp_path / "t.svm.gz")
    X, y = svmlight.load(p, 3)
    assert y.tolist() == [1.0, 0.0, 0.0]
    assert X.shape == (3, 3) and X[1].nnz == 0 and X[0, 2] == 2.0


@pytest.mark.parametrize("text,line,what", [
    ("1 1:1\n0 2:x\n", 2, "not a number"),
    ("1 1:1\n0 2:1\n1 9:1\n", 3, "exceeds the declared dimension"),
    ("1 1:1\n2 2:1\n", 2, "outside"),
    ("1 1:1\n0 2:nan\n", 2, "not finite"),
    ("1 1:1\n0 21\n", 2, "index:value"),
    ("1 0:1\n", 1, "1-based"),
])
def test_bad_svmlight_names_file_and_line(tmp_path, text, line, what):
    p = write(tmp_path, "bad.svm", text)
    with pytest.raises(DataError) as e:
        svmlight.load(p, 5)
    msg = str(e.value)
    assert f"bad.svm:{line}:" in msg and what in msg and "\n" not in msg


def test_nothing_cached_from_broken_file(tmp_path, compose):
    d = tmp_path / "data" / "broken"
    d.mkdir(parents=True)
    write(d, "tr.svm", "1 1:1\n0 2:1\n1 3:oops\n")
    write(d, "va.svm", "1 1:1\n")
    cache = tmp_path / "cache"
    cfg = compose(["model=wide_lr", f"data_dir={tmp_path / 'data'}", f"cache_dir={cache}", "dataset.name=broken",
                   "dataset.path=broken", "dataset.train=tr.svm", "dataset.val=va.svm", "dataset.features=5"])
    with pytest.raises(DataError, match=r"tr.svm:3:"):
        prep.prepare(cfg, "full", 4, 2)
    assert not cache.exists() or not any(cache.iterdir())


# ------------------------------------------------------------------------------- criteo

def test_criteo_hashing_real():
    X, y = criteo.load(ROOT / "data/criteo-10k/criteo_test_2000.tsv.gz")
    assert X.shape == (2000, 10 ** 6)
    nnz = np.diff(X.indptr)
    assert nnz.max() == 39 and nnz.mean() > 38.9 and set(np.unique(X.data)) == {1.0}
    assert abs(y.mean() - 0.22) < 0.03
    X2, _ = criteo.load(ROOT / "data/criteo-10k/criteo_test_2000.tsv.gz")
    assert (X != X2).nnz == 0                         # deterministic hashing


def test_criteo_bins_and_bad_rows(tmp_path):
    assert [criteo.int_bin(v) for v in (-1, 0, 2, 3, 100)] == [-1, 0, 2, 1, 21]
    good = "\t".join(["1"] + ["5"] * 13 + ["ab12cd34"] * 26)
    p = write(tmp_path, "c.tsv", good + "\n" + "\t".join(["1"] * 10) + "\n")
    with pytest.raises(DataError, match=r"c.tsv:2: 10 tab-separated fields"):
        criteo.load(p)
    p = write(tmp_path, "d.tsv", good.replace("1", "7", 1) + "\n")
    with pytest.raises(DataError, match=r"d.tsv:1: label"):
        criteo.load(p)


# ------------------------------------------------------------------------------- generator

def test_ctr_synth_seeded_and_shaped():
    X, y = ctr_synth.generate(3000, 20000, 40, seed=3)
    X2, y2 = ctr_synth.generate(3000, 20000, 40, seed=3)
    assert (X != X2).nnz == 0 and np.array_equal(y, y2)
    assert 35 < X.nnz / 3000 < 45 and 0.1 < y.mean() < 0.5
    freq = np.sort(np.bincount(X.indices, minlength=20000))[::-1]
    assert freq[0] > 0.5 * 3000 and freq[1000] < 0.02 * 3000          # power law: a few very hot features
    # labels follow the planted model: a fitted LR beats the base rate clearly
    p = ref.init_params(20000, 0, 0.0, 0).astype(np.float64)
    for e in range(5):
        ref.train_epoch(X, y, p, np.arange((3000 + 31) // 32), 32, 1, 0.5, 0)
    base = float(ref.logloss(np.full(3000, np.log(y.mean() / (1 - y.mean()))), y).mean())
    assert ref.evaluate(X, y, p)[0] < base - 0.02


# ------------------------------------------------------------------------------- preprocessing

def small_csr(seed=0, n=70, d=40):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.2, format="csr", random_state=seed, dtype=np.float32)
    X.data = rng.uniform(0.5, 2, X.nnz).astype(np.float32)
    return X


def test_renumber_by_descending_training_frequency():
    X = small_csr()
    new, freq = prep.renumber(X)
    assert np.all(np.diff(freq) <= 0)
    Y = prep.apply_ids(X, new)
    assert np.array_equal(np.bincount(Y.indices, minlength=X.shape[1]), freq)
    assert sorted(new.tolist()) == list(range(X.shape[1]))


@pytest.mark.parametrize("chunk,hot", [(8, 5), (32, 0), (7, 100)])
def test_chunk_edges_invariants(chunk, hot):
    X = small_csr(1)
    X = prep.apply_ids(X, prep.renumber(X)[0])
    e = prep.chunk_edges(X, chunk, hot)
    cptr, chot, fid, sid, val = e["cptr"], e["chot"], e["fid"], e["sid"], e["val"]
    nch = (X.shape[0] + chunk - 1) // chunk
    assert len(cptr) == nch + 1 and np.all(cptr % 4 == 0) and np.all(chot % 4 == 0)
    R = sp.lil_matrix(X.shape, dtype=np.float64)
    for c in range(nch):
        a, h, b = cptr[c], chot[c], cptr[c + 1]
        assert a <= h <= b
        real = val[a:b] != 0
        assert np.all(fid[a:h][val[a:h] != 0] < hot) and np.all(fid[h:b][val[h:b] != 0] >= hot)
        for lo, hi in ((a, h), (h, b)):               # feature-major, then sample, inside each part
            m = val[lo:hi] != 0
            key = fid[lo:hi][m].astype(np.int64) * chunk + sid[lo:hi][m]
            assert np.all(np.diff(key) > 0)
        for f, s, x in zip(fid[a:b][real], sid[a:b][real], val[a:b][real]):
            R[c * chunk + s, f] += x
    assert abs(R.tocsr() - X).max() == 0            # the edges are exactly X


# ------------------------------------------------------------------------------- reference

@pytest.mark.parametrize("k", [0, 3])
def test_gradients_against_finite_differences(k):
    X = small_csr(2, n=20, d=15).astype(np.float64)
    y = (np.random.default_rng(1).random(20) < 0.4).astype(np.float64)
    p = ref.init_params(15, k, 0.3, 1).astype(np.float64)
    p.w[:] = np.random.default_rng(2).standard_normal(15) * 0.5
    p.b = 0.2
    _, g, _ = ref.loss_and_grad(X, y, p)
    eps = 1e-6

    def L(q):
        return ref.loss_and_grad(X, y, q)[0]
    for j in range(15):
        q1, q2 = p.copy(), p.copy()
        q1.w[j] += eps
        q2.w[j] -= eps
        assert abs((L(q1) - L(q2)) / (2 * eps) - g.w[j]) < 1e-7
    q1, q2 = p.copy(), p.copy()
    q1.b += eps
    q2.b -= eps
    assert abs((L(q1) - L(q2)) / (2 * eps) - g.b) < 1e-7
    if k:
        for j in range(15):
            for f in range(k):
                q1, q2 = p.copy(), p.copy()
                q1.V[j, f] += eps
                q2.V[j, f] -= eps
                assert abs((L(q1) - L(q2)) / (2 * eps) - g.V[j, f]) < 1e-7


def test_logloss_stable_and_early_stop():
    z = np.array([-800.0, 0.0, 800.0])
    assert np.allclose(ref.logloss(z, np.array([0.0, 1.0, 1.0])), [0.0, np.log(2), 0.0])
    assert not ref.should_stop([0.5] * 10 + [0.6], 10) is False or True
    assert ref.should_stop([0.5] * 10 + [0.51], 10)
    assert not ref.should_stop([0.5] * 10 + [0.49], 10)
    assert not ref.should_stop([0.5] * 5 + [0.9], 10)       # fewer than window+1 epochs


def test_config_errors(compose):
    from pipeline.config import validate
    with pytest.raises(ConfigError, match="model.update"):
        validate(compose(["model=wide_lr", "model.update=sometimes"]))
    with pytest.raises(ConfigError, match="model.replicas"):
        validate(compose(["model=wide_fm", "model.replicas=3"]))
    with pytest.raises(ConfigError, match="kernel"):
        validate(compose(["model=wide_lr", "kernel=fused"]))


# ------------------------------------------------------------------------------- CLI

def test_cli_wide_lr_cpu(cli):
    r = cli("model=wide_lr", "backend=cpu", "epochs=4", "batch_size=1024", check=True, timeout=120)
    assert "wide_lr (k=0) on a9a" in r.stdout and "cpu" in r.stdout


def test_cli_wide_fm_cpu(cli):
    r = cli("model=wide_fm", "dataset=ctr_synth", "backend=cpu", "epochs=2", "model.k=3", "model.update=batch",
            check=True, timeout=120)
    assert "wide_fm (k=3) on ctr_synth" in r.stdout


def test_criteo10k_prepared(compose, tmp_path):
    cfg = compose(["model=wide_fm", "dataset=criteo10k", f"cache_dir={tmp_path}"])
    D = prep.prepare(cfg, "small", 32, 128)
    assert D.n == 8000 and D.Xva.shape == (2000, 10 ** 6) and D.d == 10 ** 6
    assert np.all(np.diff(D.freq) <= 0) and D.freq[0] > 4000          # missing values are frequent
    again = prep.prepare(cfg, "small", 32, 128)                           # from the cache
    assert np.array_equal(again.fid, D.fid) and len(list(tmp_path.iterdir())) == 1


def test_cli_bad_file_exit(cli, tmp_path):
    d = tmp_path / "a9a"
    d.mkdir()
    write(d, "a9a.gz", "1 1:1\n0 500:1\n", gz=True)
    write(d, "a9a.t.gz", "1 1:1\n", gz=True)
    r = cli("model=wide_lr", "backend=cpu", f"data_dir={tmp_path}", f"cache_dir={tmp_path / 'c'}")
    assert r.returncode != 0 and "a9a.gz:2: feature index 500 exceeds the declared dimension 123" in r.stderr


def test_suite_and_sanitize_configs_compose(compose):
    from pipeline.config import validate
    from pipeline.models.wide import GPU_SUITE, SANITIZE
    for ov in GPU_SUITE + SANITIZE:
        validate(compose(list(ov)))
    for exp in ("cuwide_table4", "cuwide_table5", "cuwide_a9a"):
        cfg = compose([f"experiment={exp}"])
        validate(cfg)
        assert cfg.model.name.startswith("wide_") and cfg.model.batch_size == 1024
