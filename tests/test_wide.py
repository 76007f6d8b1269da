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
        prep.prepare(cfg, 4, 2)
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


@pytest.mark.parametrize("k", [0, 3])
def test_adagrad_terms_against_finite_differences(k):
    """AdaGrad's step terms: the gradient sum and the per-sample squared gradients of every
    coordinate (w, b, V) against central differences of each sample's own loss."""
    rng = np.random.default_rng(4)
    X = small_csr(3, n=12, d=9).astype(np.float64)
    X.data = rng.uniform(0.5, 2.0, X.nnz)                  # not all ones: x^2, x^3, x^4 differ from x
    y = (rng.random(12) < 0.4).astype(np.float64)
    p = ref.init_params(9, k, 0.3, 1).astype(np.float64)
    p.w[:] = rng.standard_normal(9) * 0.5
    p.b = -0.2
    loss, gsum, sq = ref.step_terms(X, y, p)
    assert abs(loss - ref.loss_and_grad(X, y, p)[0]) < 1e-12
    eps = 1e-6

    def per_sample(q):
        return ref.logloss(ref.forward(X, q)[0], y)

    def fd(bump):
        q1, q2 = p.copy(), p.copy()
        bump(q1, eps)
        bump(q2, -eps)
        return (per_sample(q1) - per_sample(q2)) / (2 * eps)
    coords = [("b", None, fd(lambda q, e: setattr(q, "b", q.b + e)), gsum.b, sq.b)]
    for j in range(9):
        def bw(q, e, j=j):
            q.w[j] += e
        coords.append(("w", j, fd(bw), gsum.w[j], sq.w[j]))
        for f in range(k):
            def bv(q, e, j=j, f=f):
                q.V[j, f] += e
            coords.append(("V", (j, f), fd(bv), gsum.V[j, f], sq.V[j, f]))
    for name, at, g_s, want_sum, want_sq in coords:
        assert abs(g_s.sum() - want_sum) < 1e-7, (name, at)
        assert abs((g_s ** 2).sum() - want_sq) < 1e-7, (name, at)
    assert any(abs(c[4]) > 1e-3 for c in coords if c[0] == "V") or k == 0


@pytest.mark.parametrize("k", [0, 3])
def test_row_terms_equal_the_vectorised_gradient_of_one_sample(k):
    """reference.row_terms (one sample from its packed rows, as the kernel emulations use it) against
    loss_and_grad on that sample alone: the loss, and each edge's row gradient (w and V)."""
    rng = np.random.default_rng(6)
    X = small_csr(4, n=6, d=9).astype(np.float64)
    X.data = rng.uniform(0.5, 2.0, X.nnz)
    y = (rng.random(6) < 0.5).astype(np.float64)
    p = ref.init_params(9, k, 0.3, 2).astype(np.float64)
    p.w[:] = rng.standard_normal(9) * 0.5
    p.b = 0.1
    packed = np.concatenate([p.w[:, None], p.V], 1) if k else p.w[:, None]
    for r in range(6):
        cols, xs = X.indices[X.indptr[r]:X.indptr[r + 1]], X.data[X.indptr[r]:X.indptr[r + 1]]
        loss, dl, g = ref.row_terms(packed[cols], xs, p.b, y[r])
        want_loss, want, _ = ref.loss_and_grad(X[r], y[r:r + 1], p)
        assert abs(loss - want_loss) < 1e-12 and abs(dl - want.b) < 1e-12
        assert np.allclose(g[:, 0], want.w[cols], rtol=0, atol=1e-12)
        if k:
            assert np.allclose(g[:, 1:], want.V[cols], rtol=0, atol=1e-12)


def test_adagrad_step_by_hand():
    """One AdaGrad step: A += squares first, then w -= lr g / sqrt(A); the bias by SGD's step."""
    X = sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0]]))
    y = np.array([1.0, 0.0])
    p = ref.init_params(3, 0, 0.0, 0).astype(np.float64)
    A = ref.init_accumulator(3, 0, 0.5)
    ref.train_epoch(X, y, p, np.array([0]), 2, 1, 0.4, 8, A, 0.1)
    d = np.array([-0.5, 0.5])                                # sigmoid(0) - y
    g = X.T @ d
    sq = X.multiply(X).T @ (d * d)
    assert np.allclose(A.w, 0.5 + sq) and np.isclose(A.b, 0.5 + 0.5)
    assert np.allclose(p.w, -0.1 * g / np.sqrt(0.5 + sq))
    assert np.isclose(p.b, -0.4 / 8 * d.sum())


def test_time_to_target():
    from pipeline.train import History, time_to_target
    h = History("flow", "ours")
    for i, (vl, ms, gms) in enumerate([(0.60, 10.0, 4.0), (0.55, 12.0, 5.0), (0.54, 11.0, 6.0), (0.56, 9.0, 3.0)]):
        h.records.append({"epoch": i + 1, "val_loss": vl, "epoch_ms": ms, "gpu_ms": gms})
    t = time_to_target(h, 0.55, "val_loss", ("epoch_ms", "gpu_ms"))
    assert t == {"epochs": 2.0, "epoch_ms": 22.0, "gpu_ms": 9.0}
    assert time_to_target(h, 0.545, clocks=("gpu_ms",)) == {"epochs": 3.0, "gpu_ms": 15.0}
    assert time_to_target(h, 0.7)["epochs"] == 1.0
    for never in (0.5, float("nan")):
        t = time_to_target(h, never, clocks=("epoch_ms",))
        assert np.isnan(t["epochs"]) and np.isnan(t["epoch_ms"])
    h.records[1]["val_loss"] = float("nan")                 # a non-finite epoch never counts as reached
    assert time_to_target(h, 0.55)["epochs"] == 3.0


def test_step_bound_and_strict_target():
    from pipeline.models.wide.model import step_bound_ms, strict_target
    from pipeline.train import History
    assert step_bound_ms(4096, 1024, (1.0, 0.8)) == pytest.approx(4 * 1.0 / 1e3)        # 4 steps of 1 us
    assert step_bound_ms(4097, 1024, (1.0, 0.4)) == pytest.approx(2 * 5 * 0.4 / 1e3)    # half windows overlap
    assert np.isnan(step_bound_ms(4096, 1024, (float("nan"), float("nan"))))

    def hist(name, final):
        h = History(name, "x")
        h.records.append({"val_loss": final + 0.1})
        h.records.append({"val_loss": final})
        return h
    hs = {"flow": hist("flow", 0.52), "torch": hist("torch", 0.531), "stage": hist("stage", 0.53)}
    t, src = strict_target(hs, "chunk", 0.003)
    assert t == pytest.approx(0.533) and src.startswith("stage")
    del hs["stage"]
    assert strict_target(hs, "chunk", 0.003)[0] == pytest.approx(0.534)
    t, src = strict_target({"cpu": hist("cpu", 0.4)}, "chunk", 0.01)
    assert t == pytest.approx(0.41) and "no strict run" in src
    assert strict_target({"cpu": hist("cpu", 0.4)}, "chunk", 0.01, 0.45) == (0.45, "model.target_loss")


def test_report_on_cpu_keeps_its_names_and_adds_time_to_target(compose, tmp_path):
    """The CPU run through the harness: the report's metric and series names (those before the move
    onto pipeline.train.fit, and the time-to-quality ones), and the loss-against-time figure."""
    from pipeline.context import make_context
    from pipeline.models.wide.model import WideModel
    cfg = compose(["model=wide_lr", "backend=cpu", "size=small", "progress=false", "epochs=3",
                   f"cache_dir={tmp_path}", "model.target_loss=0.36"])
    m = WideModel(cfg, make_context(cfg, tmp_path))
    m.prepare()
    m.execute()
    m.verify()
    rep = m.report()
    for key in ("epoch_ms", "gpu_ms", "val_loss", "val_auc", "to_stop_s", "to_target_s", "to_target_gpu_s",
                "to_target_epochs"):
        assert f"summary/cpu/{key}" in rep.metrics, key
    assert rep.metrics["summary/target_loss"] == 0.36 and rep.metrics["summary/objective"] > 0
    h = m.hist["cpu"]
    want = next(i + 1 for i, v in enumerate(h.series("val_loss")) if v <= 0.36)
    assert rep.metrics["summary/cpu/to_target_epochs"] == want
    assert rep.metrics["summary/cpu/to_target_s"] == pytest.approx(sum(h.series("epoch_ms")[:want]) / 1e3)
    assert set(rep.series) == {"train_loss", "val_loss", "val_auc", "epoch_ms", "gpu_ms"}
    assert all(len(v) == h.epochs == 3 for v in rep.series.values())
    assert "loss_vs_time.png" in rep.figures and not rep.failures


def test_logloss_stable_and_early_stop():
    z = np.array([-800.0, 0.0, 800.0])
    assert np.allclose(ref.logloss(z, np.array([0.0, 1.0, 1.0])), [0.0, np.log(2), 0.0])
    assert not ref.should_stop([0.5] * 10 + [0.6], 10) is False or True
    assert ref.should_stop([0.5] * 10 + [0.51], 10)
    assert not ref.should_stop([0.5] * 10 + [0.49], 10)
    assert not ref.should_stop([0.5] * 5 + [0.9], 10)       # fewer than window+1 epochs


@pytest.mark.parametrize("overrides,key", [
    (["model=wide_lr", "model.update=sometimes"], "model.update"),
    (["model=wide_fm", "model.replicas=3"], "model.replicas"),
    (["model=wide_lr", "kernel=fused"], "kernel"),
    (["model=wide_lr", "model.design=tile"], "model.design"),
    (["model=wide_lr", "model.warp.samples=3"], "model.warp.samples"),
    (["model=wide_lr", "model.chunk=8", "model.warp.samples=16"], "model.warp.samples"),
    (["model=wide_fm", "model.warp.shards=0"], "model.warp.shards"),
    (["model=wide_fm", "model.warp.edges_per_lane=-1"], "model.warp.edges_per_lane"),
    (["model=wide_lr", "model.warp.warps_per_block=33"], "model.warp.warps_per_block"),
    (["model=wide_lr", "model.warp.shard_hot=-1"], "model.warp.shard_hot"),
    (["model=wide_lr", "model.warp.prefetch=5"], "model.warp.prefetch"),
    (["model=wide_lr", "model.warp.hot_cache=6"], "model.warp.hot_cache"),
    (["model=wide_fm", "model.k=64", "model.warp.hot_cache=1024"], "model.warp.hot_cache"),   # 557 KB of shared memory
    (["model=wide_lr", "model.optimizer=ftrl"], "model.optimizer"),
    (["model=wide_lr", "model.optimizer=adagrad", "model.update=batch"], "model.update"),
    (["model=wide_lr", "model.optimizer=adagrad", "model.design=chunk"], "model.design"),
    (["model=wide_lr", "model.optimizer=adagrad", "model.adagrad_lr=0"], "model.adagrad_lr"),
    (["model=wide_fm", "model.k=10", "model.optimizer=adagrad", "model.warp.hot_cache=4096"], "model.warp.hot_cache"),
    (["model=wide_lr", "model.target_loss=-1"], "model.target_loss"),
])
def test_config_errors(compose, overrides, key):
    from pipeline.config import validate
    with pytest.raises(ConfigError, match=key):
        validate(compose(overrides))


def test_warp_config_accepted(compose):
    from pipeline.config import validate
    validate(compose(["model=wide_fm", "model.design=warp", "model.warp.samples=4", "model.warp.shards=8"]))
    validate(compose(["model=wide_fm", "model.k=10", "model.warp.hot_cache=2048"]))          # 192 KB: fits
    validate(compose(["model=wide_fm", "model.k=10", "model.warp.hot_cache=2048", "model.optimizer=adagrad"]))  # the same


@pytest.mark.parametrize("model", ["wide_lr", "wide_fm"])
def test_warp_knobs_are_one_nested_key(compose, model):
    """The warp design's geometry is model.warp (its own schema node): its keys are there and nowhere
    else, and a key it does not declare is refused with one line naming the closest or the known keys."""
    from pipeline.config import validate
    from pipeline.models.wide.config import WarpConf
    import dataclasses
    cfg = compose([f"model={model}"])
    keys = [f.name for f in dataclasses.fields(WarpConf)]
    assert list(cfg.model.warp) == keys == ["samples", "warps_per_block", "edges_per_lane", "shards", "shard_hot",
                                            "prefetch", "hot_cache"]
    assert not set(cfg.model) & ({f"warp_{k}" for k in keys} | set(keys))
    with pytest.raises(ConfigError, match=r"^model\.warp\.bogus is not a known key in model\.warp; known keys: samples,") as e:
        validate(compose([f"model={model}", "+model.warp.bogus=1"]))
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"^model\.warp\.hot_cach is not a known key in model\.warp: did you mean "
                                          r"model\.warp\.hot_cache\?"):
        validate(compose([f"model={model}", "+model.warp.hot_cach=16"]))


@pytest.mark.slow
@pytest.mark.parametrize("override,words", [
    ("model.warp.bogus=1", ["model.warp.bogus"]),
    ("+model.warp.bogus=1", ["model.warp.bogus is not a known key in model.warp"]),
    ("model.warp_samples=2", ["model.warp_samples is not a known key in model"]),     # the flat key of before
    ("model.prefetch_bias=true", ["model.prefetch_bias is not a known key in model"]),   # a removed knob
    ("model.warp.samples=3", ["model.warp.samples=3", "power of two"])])
def test_cli_warp_key_errors_are_one_line(cli, override, words):
    r = cli("model=wide_lr", "backend=cpu", "epochs=1", override, timeout=120)
    assert r.returncode != 0, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], lines[0]


def warp_conf(samples=1, warps_per_block=0, edges_per_lane=0, shards=1, shard_hot=0, prefetch=0, hot_cache=0):
    """model.warp as the trainers read it (the schema's defaults unless given)."""
    return dict(samples=samples, warps_per_block=warps_per_block, edges_per_lane=edges_per_lane, shards=shards,
                shard_hot=shard_hot, prefetch=prefetch, hot_cache=hot_cache)


def _geo_data(chunk=32, n=4000, d=3000, seed=0):
    X, y = ctr_synth.generate(n, d, 40, seed)
    return prep.from_arrays(prep.build_arrays(X[:-400], y[:-400], X[-400:], y[-400:], chunk, 16, seed), chunk, 16)


@pytest.mark.parametrize("k,ws", [(0, 1), (0, 4), (10, 1), (10, 2), (3, 8)])
def test_warp_geometry(k, ws):
    """design=warp keeps the in-flight bound of design=chunk: model.inflight chunks (default
    model.inflight_batches mini-batches) x chunk samples, now as warps x samples per warp, spread over every SM."""
    from omegaconf import OmegaConf
    from pipeline.models.wide.gpu import packed_width, warp_geometry
    data = _geo_data()
    mc = OmegaConf.create(dict(k=k, batch_size=1024, inflight=0, inflight_batches=2,
                               warp=warp_conf(samples=ws, shards=8, shard_hot=64)))
    g = warp_geometry(mc, data, 132)
    assert g["nw"] * g["WS"] == 2048 and g["WG"] * ws == 32
    assert -(-g["nw"] // g["wpb"]) >= 132 or g["wpb"] == 1          # a block on every SM
    lens = np.diff(data.Xtr.indptr)
    assert g["WEPL"] * g["WG"] >= min(np.percentile(lens, 99), g["WG"] * (16 if k == 0 else 96 // g["kp"]))
    assert g["kp"] == packed_width(k) and g["kp"] % (4 if k else 1) == 0 and g["kp"] >= 1 + k
    assert (g["NSH"], g["HSH"]) == (8, 64)
    assert g["WPF"] == (2 if g["kp"] * g["WEPL"] <= 48 else 1)
    mc.inflight, mc.warp.shard_hot = 32, 0                 # one mini-batch; no sharded rows: no shards
    g = warp_geometry(mc, data, 132)
    assert g["nw"] * g["WS"] == 1024 and (g["NSH"], g["HSH"]) == (1, 0)


def test_hot_fixed_exponent():
    """The fixed-point exponent of LR's cached step gradient: the largest step sum of a coordinate within
    2^30, used only at a resolution of 2^-30 or finer; FM, no cache and update=batch keep float atomics."""
    from pipeline.models.wide.variants import hot_fixed_exponent as hfe
    e = hfe(0, 256, "chunk", 0.5 / 1024, 16)            # LR's defaults: lr 0.5, batch 1024, 8 warps x 2 samples
    assert e == 37 and 16 * 0.5 / 1024 * 2.0 ** e <= 2.0 ** 30 < 2 * 16 * 0.5 / 1024 * 2.0 ** e
    assert hfe(0, 256, "chunk", 0.02, 16) == 31         # AdaGrad: a step is at most adagrad_lr
    assert hfe(0, 256, "chunk", 0.5 / 1024 * 1000.0, 16) == 0       # |x| up to 1000: too coarse, float
    assert hfe(10, 256, "chunk", 1e-4, 16) == hfe(0, 0, "chunk", 1e-4, 16) == hfe(0, 256, "batch", 1e-4, 16) == 0
    assert hfe(0, 256, "chunk", 0.0, 16) == hfe(0, 256, "chunk", 1e-30, 16) == 60
    from omegaconf import OmegaConf
    from pipeline.models.wide.gpu import warp_geometry
    data = _geo_data()
    base = dict(k=0, lr=0.5, batch_size=1024, inflight=0, inflight_batches=2, update="chunk",
                warp=warp_conf(samples=2, warps_per_block=8, shards=8, shard_hot=64, hot_cache=64))
    xmax = float(np.abs(data.Xtr.data).max())
    assert warp_geometry(OmegaConf.create(base), data, 132)["HQ"] == hfe(0, 64, "chunk", 0.5 / 1024 * xmax, 16) > 0
    for off in (dict(warp={**base["warp"], "hot_cache": 0}), dict(k=3), dict(update="batch")):
        assert warp_geometry(OmegaConf.create({**base, **off}), data, 132)["HQ"] == 0, off
    ada = warp_geometry(OmegaConf.create({**base, "optimizer": "adagrad", "adagrad_lr": 0.02}), data, 132)
    assert ada["HQ"] == 31


def test_hot_square_exponent_and_the_cached_accumulators():
    """AdaGrad with the hot rows' accumulators cached (LR only): the squares' fixed-point exponent keeps
    a block step's largest sum within 2^30 and is used only at a resolution of 1e-5 of the smallest
    accumulator; the geometry turns the cache on only for LR AdaGrad with a hot-row cache, and counts
    its shared memory."""
    from pipeline.models.wide.variants import hot_cache_bytes, hot_square_exponent as hse
    e = hse(16, 1.0, 0.01)                              # LR's defaults: 8 warps x 2 samples, |x| <= 1, init 0.01
    assert e == 26 and 16 * 2.0 ** e <= 2.0 ** 30 < 2 * 16 * 2.0 ** e
    assert hse(16, 1.0, 1e-4) == 0                      # 2^-26 > 1e-9: too coarse, float atomics
    assert hse(16, 1.0, 0.0) == 0 and hse(1, 0.0, 0.01) == 60
    assert hot_cache_bytes(256, 0, True) == hot_cache_bytes(256, 0) + 12 * 256
    from omegaconf import OmegaConf
    from pipeline.models.wide.gpu import warp_geometry
    data = _geo_data()
    base = dict(k=0, lr=0.5, batch_size=1024, inflight=0, inflight_batches=2, update="chunk",
                warp=warp_conf(samples=2, warps_per_block=8, shards=8, shard_hot=64, hot_cache=64),
                optimizer="adagrad", adagrad_lr=0.02, adagrad_init=0.01)
    xmax = float(np.abs(data.Xtr.data).max())
    g = warp_geometry(OmegaConf.create(base), data, 132)
    assert g["AHC"] == 1 and g["AQ"] == hse(16, xmax * xmax, 0.01) > 0 and g["smem"] == hot_cache_bytes(64, 0, True)
    assert warp_geometry(OmegaConf.create({**base, "adagrad_init": 1e-6}), data, 132)["AQ"] == 0   # too coarse: float
    for off in (dict(warp={**base["warp"], "hot_cache": 0}), dict(k=3), dict(optimizer="sgd")):
        g = warp_geometry(OmegaConf.create({**base, **off}), data, 132)
        assert g["AHC"] == 0 and g["AQ"] == 0 and g["smem"] == hot_cache_bytes(g["HC"], off.get("k", 0)), off


NVCC = __import__("shutil").which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("defs", ["-DWS=1 -DWEPL=2 -DNSH=8 -DHSH=256", "-DWS=4 -DWEPL=7 -DNSH=1 -DHSH=0",
                                  "-DK=10 -DH=128 -DWS=1 -DWEPL=2 -DNSH=4 -DHSH=32",
                                  "-DK=10 -DWS=4 -DWEPL=8 -DNSH=4 -DHSH=32", "-DK=3 -DC=4 -DWS=4 -DWEPL=1",
                                  "-DK=64 -DWS=1 -DWEPL=1 -DNSH=2 -DHSH=8 -DWPF=1",
                                  "-DWPF=1", "-DWS=2 -DWEPL=3 -DWPF=3", "-DK=10 -DWS=4 -DWEPL=7 -DWPF=1",
                                  "-DWS=4 -DWEPL=4 -DNSH=8 -DHSH=256 -DHC=256", "-DK=10 -DWS=4 -DWEPL=8 -DHC=64 -DWPF=1",
                                  "-DWS=2 -DWEPL=3 -DNSH=8 -DHSH=256 -DHC=256 -DHQ=37",
                                  "-DOPT=1 -DWS=2 -DWEPL=4 -DNSH=8 -DHSH=256",
                                  "-DOPT=1 -DWS=2 -DWEPL=4 -DNSH=8 -DHSH=256 -DHC=256 -DAHC=1 -DAQ=26 -DHQ=31",
                                  "-DOPT=1 -DK=10 -DWS=4 -DWEPL=8 -DNSH=4 -DHSH=32",
                                  "-DOPT=1 -DK=10 -DWS=4 -DWEPL=8 -DNSH=4 -DHSH=32 -DHC=32"])
@pytest.mark.slow
def test_warp_kernel_compiles_without_spills(defs, tmp_path):
    """The warp design's kernels compile for sm_90 at the geometries the trainer picks, without
    local-memory spills (a spill would put a step's registers behind global memory latency)."""
    import subprocess
    r = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-std=c++17", "-Xptxas", "-v", f"-I{ROOT / 'cuda/common'}",
                        *defs.split(), "-o", str(tmp_path / "w.cubin"), str(ROOT / "cuda/wide/wide.cu")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stderr.splitlines()
    i = next(i for i, l in enumerate(out) if "Function properties for flow_warp" in l)
    assert "0 bytes spill stores" in out[i + 1], out[i + 1]


# ------------------------------------------------------------------------------- warp kernel on the host
# The warp design's CUDA code (flow_warp, warp_commit) compiled by g++ against a small shim (one
# std::thread per lane, shuffles and __syncwarp as barriers, atomics under a mutex, the sm_90 vector
# RED path) and driven by the real FlowWarpTrainer with NumPy standing in for CuPy: index math,
# the prefetch pipeline, the FM algebra, the shards and their folding checked without a GPU.
# emu_flow_warp runs the blocks (of one warp) one after another; emu_flow_warp_rr runs them
# together, one at a time between barriers in turn (block 0, 1, ..., 0, ...: every __syncthreads
# hands over, each block's shared memory kept aside), so all blocks run step t before any runs t + 1.

SHIM = r"""
#pragma once
#include <cmath>
#include <cstddef>
#include <algorithm>
#include <mutex>
#include <barrier>
#include <semaphore>
#include <cstdlib>
using std::min; using std::max;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __restrict__ __restrict
struct dim_ { unsigned x = 0, y = 0, z = 0; };
extern thread_local dim_ threadIdx, blockIdx;
extern dim_ blockDim, gridDim;
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct int4 { int x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
extern std::mutex g_atomic;
inline float atomicAdd(float* p, float v) { std::lock_guard<std::mutex> l(g_atomic); float o = *p; *p += v; return o; }
inline double atomicAdd(double* p, double v) { std::lock_guard<std::mutex> l(g_atomic); double o = *p; *p += v; return o; }
inline float4 atomicAdd(float4* p, float4 v) {
    std::lock_guard<std::mutex> l(g_atomic); float4 o = *p; p->x += v.x; p->y += v.y; p->z += v.z; p->w += v.w; return o; }
inline float atomicExch(float* p, float v) { std::lock_guard<std::mutex> l(g_atomic); float o = *p; *p = v; return o; }
inline int atomicAdd(int* p, int v) { std::lock_guard<std::mutex> l(g_atomic); int o = *p; *p += v; return o; }
inline int __float2int_rn(float x) { return (int)std::nearbyint(x); }   // round to nearest even
inline float __expf(float x) { return expf(x); }
inline float __fdividef(float a, float b) { return a / b; }
extern thread_local std::barrier<>* g_bar;                  // the lane's warp
extern thread_local void (*g_sync)();                       // __syncthreads of the round-robin driver
// lane-serial driver: between two barriers of the warp its lanes run one at a time in lane order (lane l
// waits on turn[l], passes it to l + 1 at its next barrier); null: the lanes run freely
struct Turn { std::binary_semaphore s{0}; };
extern thread_local Turn* g_turn;
inline void warp_barrier() {
    const int l = threadIdx.x & 31;
    if (g_turn) g_turn[(l + 1) & 31].s.release();
    g_bar->arrive_and_wait();
    if (g_turn) g_turn[l].s.acquire();
}
inline void __syncthreads() { if (g_sync) g_sync(); else warp_barrier(); }   // blocks of one warp
extern thread_local double* g_xchg;
template <class T> inline T shfl_from(T v, int src) {
    g_xchg[threadIdx.x & 31] = (double)v;
    warp_barrier();
    T r = (T)g_xchg[src & 31];
    warp_barrier();
    return r;
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int o) { return shfl_from(v, (int)(threadIdx.x & 31) ^ o); }
template <class T> inline T __shfl_down_sync(unsigned, T v, int o) {
    int l = threadIdx.x & 31; return shfl_from(v, l + o < 32 ? l + o : l); }
template <class T> inline T __shfl_sync(unsigned, T v, int s) { return shfl_from(v, s); }
inline void __syncwarp(unsigned = 0xffffffffu) { warp_barrier(); }
"""

DRIVER = r"""
#include <thread>
#include <vector>
#include <memory>
#include <condition_variable>
#include "cuda_runtime.h"
thread_local dim_ threadIdx, blockIdx;
dim_ blockDim, gridDim;
std::mutex g_atomic;
thread_local std::barrier<>* g_bar;
thread_local void (*g_sync)();
thread_local Turn* g_turn;
thread_local double* g_xchg;
int g_lane_serial;                               // emu_flow_warp: the lanes of a warp in turn between barriers
float smem[1 << 16];
#include "WIDE_CU"
float4 wsm4[1 << 14];
// round robin: the block whose turn it is runs up to its next barrier, then hands the turn on
constexpr int RR_SMEM = 1 << 12;                 // float4s of a block's shared memory kept aside
std::mutex rr_m;
std::condition_variable rr_cv;
int rr_turn, rr_grid;
std::vector<char> rr_done;
std::vector<std::vector<float4>> rr_smem;
struct RRPass {
    int b;
    void operator()() noexcept {                 // all lanes of block b arrived: the next block's turn
        std::lock_guard<std::mutex> l(rr_m);
        std::copy(wsm4, wsm4 + RR_SMEM, rr_smem[b].begin());
        int nx = b;
        for (int i = 0; i < rr_grid; i++) { nx = (nx + 1) % rr_grid; if (!rr_done[nx]) break; }
        rr_turn = nx;
        std::copy(rr_smem[nx].begin(), rr_smem[nx].end(), wsm4);
        rr_cv.notify_all();
    }
};
thread_local std::barrier<RRPass>* rr_bar;
void rr_wait() { std::unique_lock<std::mutex> l(rr_m); rr_cv.wait(l, [] { return rr_turn == (int)blockIdx.x; }); }
void rr_sync() { rr_bar->arrive_and_wait(); rr_wait(); }
extern "C" void emu_flow_warp_rr(int grid, int block, const int* order, int n_order, const long long* indptr,
        const int* indices, const float* data, const float* y, int n, int nw, const float* P, const float* Psh,
        const float* bb, float* T, float* Tsh, float* tb, int sw, float scale, double* loss, float* A, float* Ash,
        float ascale) {
    if (block != 32) return;                     // blocks of one warp only
    gridDim.x = grid; blockDim.x = block;
    rr_grid = grid; rr_turn = 0;
    rr_done.assign(grid, 0);
    rr_smem.assign(grid, std::vector<float4>(RR_SMEM));
    std::vector<std::unique_ptr<std::barrier<>>> wb;
    std::vector<std::unique_ptr<std::barrier<RRPass>>> sb;
    std::vector<std::vector<double>> xc(grid, std::vector<double>(32));
    for (int b = 0; b < grid; b++) {
        wb.emplace_back(new std::barrier<>(32));
        sb.emplace_back(new std::barrier<RRPass>(32, RRPass{b}));
    }
    std::vector<std::thread> th;
    for (int b = 0; b < grid; b++)
        for (int l = 0; l < 32; l++)
            th.emplace_back([=, &wb, &sb, &xc] { blockIdx.x = b; threadIdx.x = l;
                g_bar = wb[b].get(); rr_bar = sb[b].get(); g_xchg = xc[b].data(); g_sync = rr_sync;
                rr_wait();
                flow_warp(order, n_order, indptr, indices, data, y, n, nw, P, Psh, bb, T, Tsh, tb, sw, scale, loss,
                          A, Ash, ascale);
                rr_done[b] = 1;                  // only this block runs now
                rr_bar->arrive_and_wait(); });
    for (auto& t : th) t.join();
}
extern "C" void emu_flow_warp(int grid, int block, const int* order, int n_order, const long long* indptr,
        const int* indices, const float* data, const float* y, int n, int nw, const float* P, const float* Psh,
        const float* bb, float* T, float* Tsh, float* tb, int sw, float scale, double* loss, float* A, float* Ash,
        float ascale) {
    gridDim.x = grid; blockDim.x = block;
    std::barrier<> bar(32);
    std::barrier<>* pb = &bar;
    static double xc[32];
    for (int b = 0; b < grid; b++)
        for (int w = 0; w < block / 32; w++) {           // warps one after another, lanes as threads
            std::vector<Turn> turn(32);
            turn[0].s.release();                         // lane-serial: lane 0 first
            Turn* pt = g_lane_serial ? turn.data() : nullptr;
            std::vector<std::thread> th;
            for (int l = 0; l < 32; l++)
                th.emplace_back([=] { blockIdx.x = b; threadIdx.x = w * 32 + l; g_bar = pb; g_xchg = xc; g_sync = nullptr;
                    g_turn = pt;
                    if (pt) pt[l].s.acquire();
                    flow_warp(order, n_order, indptr, indices, data, y, n, nw, P, Psh, bb, T, Tsh, tb, sw, scale, loss,
                              A, Ash, ascale);
                    if (pt) pt[(l + 1) & 31].s.release(); });
            for (auto& t : th) t.join();
        }
}
extern "C" void emu_warp_commit(int grid, int block, const int* order, int n_order, int n, const long long* indptr,
        const int* indices, float* P, float* bb, float* Gr, float* gb) {
    gridDim.x = grid; blockDim.x = block;
    for (int b = 0; b < grid; b++) for (int t = 0; t < block; t++) {
        blockIdx.x = b; threadIdx.x = t; warp_commit(order, n_order, n, indptr, indices, P, bb, Gr, gb); }
}
"""
GXX = __import__("shutil").which("g++")


def _gxx_has_barrier(tmp) -> bool:
    """Whether g++ compiles C++20's std::barrier, which the host shim's block barriers need."""
    import subprocess
    src = tmp / "barrier_probe.cpp"
    src.write_text("#include <barrier>\nstd::barrier<> b(1);\nint main() { b.arrive_and_wait(); }\n")
    r = subprocess.run([GXX, "-std=c++20", "-pthread", "-fsyntax-only", str(src)], capture_output=True, timeout=120)
    return r.returncode == 0


class _HostArray(np.ndarray):
    def get(self):
        return np.array(self)


def _fake_cupy():
    import types
    m = types.ModuleType("cupy")
    m.float32, m.float64, m.int32 = np.float32, np.float64, np.int32
    m.zeros = lambda n, dt: np.zeros(n, dt).view(_HostArray)
    m.asarray = lambda a, dt=None: np.array(a, dt).view(_HostArray)
    return m


class _HostKernels:
    """kernels.load stand-in: the warp kernels of wide.cu built by g++ with the trainer's defines
    (round_robin: flow_warp runs its blocks together, in turn between barriers; lane_serial: the
    lanes of a warp run one at a time in lane order between its barriers, so the order of their
    atomics is fixed)."""

    def __init__(self, tmp_path, round_robin=False, lane_serial=False):
        self.tmp, self.libs, self.rr, self.serial = tmp_path, {}, round_robin, lane_serial

    def load(self, model, filename, defines):
        import ctypes
        import subprocess
        key = tuple(sorted(defines.items()))
        if key not in self.libs:
            inc = self.tmp / "inc"
            inc.mkdir(exist_ok=True)
            (inc / "cuda_runtime.h").write_text(SHIM)
            drv = self.tmp / "driver.cpp"
            drv.write_text(DRIVER.replace("WIDE_CU", str(ROOT / "cuda/wide/wide.cu")))
            out = self.tmp / f"lib{len(self.libs)}.so"
            r = subprocess.run([GXX, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", f"-I{inc}",
                                "-D__CUDA_ARCH__=900", *[f"-D{k}={v}" for k, v in key], "-o", str(out), str(drv)],
                               capture_output=True, text=True, timeout=300)
            if r.returncode:
                # a g++ without C++20's <barrier> is a missing tool (skip); any other error is the
                # kernel's or the shim's, and fails
                if not _gxx_has_barrier(self.tmp):
                    pytest.skip("g++ has no C++20 <barrier> (std::barrier): the host shim needs g++ >= 11")
                pytest.fail(f"g++ cannot build wide.cu on the host shim: {r.stderr[-2000:]}")
            self.libs[key] = ctypes.CDLL(str(out))
        ctypes.c_int.in_dll(self.libs[key], "g_lane_serial").value = int(self.serial)
        return _HostModule(self.libs[key], self.rr)


class _HostModule:
    def __init__(self, lib, round_robin=False):
        self.lib, self.rr = lib, round_robin

    def kernel(self, name, signature):
        import ctypes
        fn = getattr(self.lib, "emu_" + name + ("_rr" if self.rr and name == "flow_warp" else ""))

        def call(grid, block, *args, **kw):
            assert len(args) == len(signature), (name, len(args), signature)
            conv = [int(grid[0]), int(block[0])]
            for a, c in zip(args, signature):
                if c == "P":
                    assert isinstance(a, np.ndarray) and a.flags.c_contiguous, (name, type(a))
                    conv.append(ctypes.c_void_p(a.ctypes.data))
                elif c == "i":
                    assert isinstance(a, np.int32), (name, type(a))
                    conv.append(ctypes.c_int(int(a)))
                else:
                    assert isinstance(a, np.float32), (name, type(a))
                    conv.append(ctypes.c_float(float(a)))
            fn(*conv)
        call.max_threads, call.registers = 1024, 32     # the host runs any block size
        return call


class _NoEvent:
    """A CUDA event stand-in for trainers run on the host (no device, nothing to time)."""
    def record(self, *a):
        pass

    def synchronize(self):
        pass

    def time_since(self, other):
        return 0.0


def _untimed(tr) -> None:
    tr._events = lambda: (_NoEvent(), _NoEvent())


@pytest.mark.skipif(GXX is None, reason="g++ is not on PATH")
@pytest.mark.parametrize("k,ws,shards,hot,update,inflight,hc", [
    (0, 1, 8, 64, "batch", 0, 0), (10, 2, 4, 32, "batch", 0, 0), (3, 8, 2, 8, "batch", 0, 0),
    (0, 4, 4, 64, "chunk", 8, 0), (10, 4, 4, 32, "chunk", 8, 0), (3, 2, 8, 16, "chunk", 16, 0),
    (10, 1, 1, 0, "chunk", 1, 0),
    (0, 4, 4, 64, "chunk", 8, 32), (10, 2, 4, 8, "chunk", 8, 16), (3, 1, 1, 0, "chunk", 4, 8),
    (0, 2, 8, 16, "batch", 0, 64), (10, 4, 4, 32, "batch", 0, 4)])
@pytest.mark.slow
def test_warp_kernel_on_host_equals_reference(monkeypatch, tmp_path, k, ws, shards, hot, update, inflight, hc):
    """update=batch: one pass equals the mini-batch reference. update=chunk with chunk = warp.samples
    (a unit is a chunk): the host runs the warps one after another, so the result equals the
    reference's chunk steps in that warp-major order, every warp adding into its own shard.
    hc > 0: a block of one warp with its hot-row cache (rows read at the start of each step, the
    step's hot gradients added at its end, into the block's shard), which keeps that order exact.
    The rows past the hot ones are spread over the table (params() maps them back)."""
    import sys
    import types
    from omegaconf import OmegaConf
    import pipeline.gpu.kernels as kernels
    import pipeline.gpu.transfer as transfer
    from pipeline.models.wide import gpu
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setattr(kernels, "load", _HostKernels(tmp_path).load)
    monkeypatch.setattr(transfer, "upload_all", lambda d: {key: np.ascontiguousarray(v) for key, v in d.items()})
    chunk = ws if update == "chunk" else 32
    X, y = ctr_synth.generate(2000, 4000, 40, 1)
    X.data = np.random.default_rng(2).uniform(0.5, 2.0, X.nnz).astype(np.float32)     # not all ones: x^2 != x
    data = prep.from_arrays(prep.build_arrays(X[:-200], y[:-200], X[-200:], y[-200:], chunk, 16, 0), chunk, 16)
    mc = OmegaConf.create(dict(k=k, lr=0.5, batch_size=256, replicas=4, update=update, inflight=inflight, chunk=chunk,
                               warp=warp_conf(samples=ws, warps_per_block=1 if hc else 0, shards=shards,
                                              shard_hot=hot, hot_cache=hc)))
    tr = gpu.FlowWarpTrainer(data, mc, types.SimpleNamespace(device=types.SimpleNamespace(sm_count=132)))
    assert tr.geo["HC"] == hc and (tr.geo["wpb"] == 1 or not hc)
    # LR's cached rows take their step gradient in fixed point (update=chunk), else float atomics
    assert (tr.geo["HQ"] >= 30) == (k == 0 and hc > 0 and update == "chunk") and tr.geo["HQ"] in range(0, 61)
    # the hot rows stay, the others move
    assert np.array_equal(tr.row[:tr.keep], np.arange(tr.keep)) and (tr.row[tr.keep:] != np.arange(tr.keep, data.d)).any()
    assert np.array_equal(np.sort(tr.row), np.arange(data.d)) and f"rows past {tr.keep} spread" in tr.describe()

    _untimed(tr)
    rng = np.random.default_rng(k + ws)
    p0 = ref.init_params(data.d, k, 0.05, 3)
    p0.w = (rng.standard_normal(data.d) * 0.1).astype(np.float32)
    p0.b = 0.3
    tr.set_params(p0)
    if tr.nsh > 1:                                      # spread the hot rows and the bias over the shards
        P = tr.P.reshape(data.d, tr.kp)
        part = P[:tr.hsh] * 0.25
        P[:tr.hsh] -= part * (tr.nsh - 1)
        tr.Psh.reshape(tr.nsh - 1, tr.hsh, tr.kp)[...] = part[None]
        tr.bb[::32][:tr.nsh] = tr.bb[0] / tr.nsh
    order = rng.permutation(data.n_chunks)[:40].astype(np.int32)
    q = p0.astype(np.float64)
    if update == "batch":
        want_loss = ref.train_epoch(data.Xtr, data.ytr, q, order, chunk, 256 // chunk, 0.5)
    else:
        nw = tr.geo["nw"]
        assert nw == inflight
        seq = np.concatenate([order[g::nw] for g in range(nw)])
        want_loss = ref.train_epoch(data.Xtr, data.ytr, q, seq, chunk, 1, 0.5, 256 // chunk * chunk)
    loss, _ = tr.epoch(order)
    got = tr.params()
    rows = sum(min(chunk, data.n - int(c) * chunk) for c in order)
    err = max(float(np.abs(got.w - q.w).max()), abs(got.b - q.b), float(np.abs(got.V - q.V).max()) if k else 0.0)
    assert err <= 2e-6, (tr.geo, err)
    assert abs(loss * data.n / rows - want_loss) <= 1e-6


def _param_and_accumulator_errors(tr, q, acc, k):
    """Largest |trainer - expected| over the parameters (w, b, V) and over the AdaGrad accumulators."""
    got, got_acc = tr.params(), tr.accumulators()
    err = max(float(np.abs(got.w - q.w).max()), abs(got.b - q.b), float(np.abs(got.V - q.V).max()) if k else 0.0)
    aerr = max(float(np.abs(got_acc.w - acc.w).max()), float(np.abs(got_acc.V - acc.V).max()) if k else 0.0)
    return err, aerr


@pytest.mark.skipif(GXX is None, reason="g++ is not on PATH")
@pytest.mark.parametrize("k,shards,hot,inflight,hc,init", [
    (0, 1, 0, 1, 0, 0.01), (0, 8, 64, 4, 0, 0.01), (10, 4, 32, 3, 0, 0.01), (3, 2, 8, 4, 0, 0.01),
    (10, 2, 8, 2, 16, 0.01), (0, 4, 64, 1, 32, 0.01), (0, 4, 64, 1, 32, 1e-6)])
@pytest.mark.slow
def test_warp_adagrad_on_host_equals_reference(monkeypatch, tmp_path, k, shards, hot, inflight, hc, init):
    """model.optimizer=adagrad in the warp kernel (run on the host as above) with one sample a step
    (chunk = warp.samples = 1) and the warps one after another: each sample's accumulator atomics
    see every square before them, so the pass equals the reference's AdaGrad steps in that order,
    with the hot rows and their accumulators spread over the shards, and through the hot-row cache
    (FM: global accumulators). LR with the cache: the cached rows' accumulators in the block's shared
    memory, with one block in flight (B = 1), where a step's normalisation is exactly the sequential
    one; its squares in fixed point, or (adagrad_init 1e-6: too coarse for fixed point) in float
    shared-memory atomics."""
    import sys
    import types
    from omegaconf import OmegaConf
    import pipeline.gpu.kernels as kernels
    import pipeline.gpu.transfer as transfer
    from pipeline.models.wide import gpu
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setattr(kernels, "load", _HostKernels(tmp_path).load)
    monkeypatch.setattr(transfer, "upload_all", lambda d: {key: np.ascontiguousarray(v) for key, v in d.items()})
    X, y = ctr_synth.generate(2000, 4000, 40, 1)
    X.data = np.random.default_rng(2).uniform(0.5, 2.0, X.nnz).astype(np.float32)
    data = prep.from_arrays(prep.build_arrays(X[:-200], y[:-200], X[-200:], y[-200:], 1, 16, 0), 1, 16)
    mc = OmegaConf.create(dict(k=k, lr=0.5, batch_size=256, replicas=4, update="chunk", inflight=inflight, chunk=1,
                               warp=warp_conf(samples=1, warps_per_block=1 if hc else 0, shards=shards, shard_hot=hot,
                                              hot_cache=hc),
                               optimizer="adagrad", adagrad_lr=0.05, adagrad_init=init))
    tr = gpu.FlowWarpTrainer(data, mc, types.SimpleNamespace(device=types.SimpleNamespace(sm_count=132)))
    ahc = k == 0 and hc > 0
    assert tr.adagrad and tr.geo["nw"] == inflight and tr.geo["AHC"] == int(ahc)
    assert tr.geo["smem"] == 8 * hc * tr.kp + (144 if hc else 0) + (12 * hc if ahc else 0)
    assert (tr.geo["AQ"] >= 24) == (ahc and init > 1e-4) and (tr.geo["HQ"] > 0) == ahc

    _untimed(tr)
    rng = np.random.default_rng(k + shards)
    p0 = ref.init_params(data.d, k, 0.05, 3)
    p0.w = (rng.standard_normal(data.d) * 0.1).astype(np.float32)
    p0.b = 0.3
    tr.set_params(p0)
    acc = ref.init_accumulator(data.d, k, init)
    if tr.nsh > 1:      # part of the hot rows' accumulators in the other shards (the sums unchanged)
        A = tr.A.reshape(data.d, tr.kp)
        A[:tr.hsh] -= 0.4 * init * (tr.nsh - 1)
        tr.Ash[...] = 0.4 * init
    order = rng.permutation(data.n_chunks)[:60].astype(np.int32)
    q = p0.astype(np.float64)
    seq = np.concatenate([order[g::inflight] for g in range(inflight)])
    want_loss = ref.train_epoch(data.Xtr, data.ytr, q, seq, 1, 1, 0.5, 256, acc, 0.05)
    loss, _ = tr.epoch(order)
    err, aerr = _param_and_accumulator_errors(tr, q, acc, k)
    assert float(np.abs(q.w - p0.w).max()) > 1e-3                    # it trained
    assert err <= 2e-6, (tr.geo, err)
    assert aerr <= 1e-5 * max(1.0, float(np.abs(acc.w).max())), (tr.geo, aerr)
    assert abs(loss * data.n / len(order) - want_loss) <= 1e-6


def _emulate_rr_adagrad(X, y, p, A, order, nb, nsteps, scale, alr, hot_acc=False):
    """What flow_warp with every feature cached (blocks of one warp, one sample a step) computes under
    the round-robin driver, with AdaGrad's accumulator global: at each step boundary block 0, 1, ...
    in turn adds its step gradients (rows and bias) into the model and reloads its rows and bias;
    then each block in turn runs its sample of the step on those, each square going into the one
    accumulator the later blocks' steps see. hot_acc (LR's cached accumulators): each block's squares
    of the step go into its own copy instead, added to the accumulator at the next boundary (with the
    rows), and a step is normalised by the accumulator as of the block's boundary + the block's
    squares of the step so far + the other blocks' squares since its last boundary (the first step:
    nb - 1 times its own). p and A (float64 Params, summed shards) in place; returns the summed loss."""
    d = X.shape[1]
    kp1 = 1 if p.V is None else 1 + p.V.shape[1]
    model = np.concatenate([p.w[:, None], p.V], 1) if kp1 > 1 else p.w[:, None].copy()
    acc = np.concatenate([A.w[:, None], A.V], 1) if kp1 > 1 else A.w[:, None].copy()
    gh = np.zeros((nb, d, kp1))
    ph = np.zeros((nb, d, kp1))
    ga = np.zeros((nb, d, kp1))                    # hot_acc: each block's squares of the step
    ah = np.zeros((nb, d, kp1))                    # hot_acc: the accumulators as of the block's boundary
    da = np.zeros((nb, d, kp1))                    # hot_acc: the other blocks' squares since its last one
    gb, pb = np.zeros(nb), np.zeros(nb)
    lsum = 0.0
    for t in range(nsteps + 1):
        for b in range(nb):                        # boundary: flush, reload
            model += gh[b]
            gh[b] = 0.0
            ph[b] = model
            acc += ga[b]
            da[b] = acc - ah[b] - ga[b]
            ga[b] = 0.0
            ah[b] = acc
            p.b += gb[b]
            gb[b] = 0.0
            pb[b] = p.b
        if t == nsteps:
            break
        for b in range(nb):
            u = b + t * nb
            if u >= len(order):
                continue
            r = int(order[u])
            cols, xs = X.indices[X.indptr[r]:X.indptr[r + 1]], X.data[X.indptr[r]:X.indptr[r + 1]].astype(np.float64)
            loss, dl, g = ref.row_terms(ph[b][cols], xs, pb[b], y[r])
            gb[b] += scale * dl
            lsum += loss
            for i, f in enumerate(cols):
                if hot_acc:
                    ga[b][f] += g[i] * g[i]
                    others = da[b][f] if t > 0 else (nb - 1) * ga[b][f]
                    gh[b][f] += -alr * g[i] / np.sqrt(ah[b][f] + ga[b][f] + others)
                else:
                    acc[f] += g[i] * g[i]
                    gh[b][f] += -alr * g[i] / np.sqrt(acc[f])
    p.w[:] = model[:, 0]
    A.w[:] = acc[:, 0]
    if kp1 > 1:
        p.V[:] = model[:, 1:]
        A.V[:] = acc[:, 1:]
    return lsum


@pytest.mark.skipif(GXX is None, reason="g++ is not on PATH")
@pytest.mark.parametrize("k,shards", [(3, 1), (3, 2), (0, 1), (0, 4)])
@pytest.mark.slow
def test_warp_adagrad_hot_cache_blocks_in_flight_share_the_accumulator(monkeypatch, tmp_path, k, shards):
    """model.optimizer=adagrad with every feature in the hot-row cache and 8 blocks running each step
    together (the round-robin driver: within a step block b runs after blocks 0..b-1). FM's global
    accumulators: a cached coordinate's step sees the squares every block issued to it before, as one
    global accumulator gives. LR's cached accumulators: the accumulator as of the block's boundary + the block's own squares of the
    step + the other blocks' squares of the last step (the first step: 7 times its own; a block-local
    copy without the others' share would let B blocks in flight step a hot coordinate up to sqrt(B)
    times too far). Checked against a NumPy emulation of that schedule (hot rows, bias and
    accumulators as of each block's boundary)."""
    import sys
    import types
    from omegaconf import OmegaConf
    import pipeline.gpu.kernels as kernels
    import pipeline.gpu.transfer as transfer
    from pipeline.models.wide import gpu
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setattr(kernels, "load", _HostKernels(tmp_path, round_robin=True).load)
    monkeypatch.setattr(transfer, "upload_all", lambda d: {key: np.ascontiguousarray(v) for key, v in d.items()})
    rng = np.random.default_rng(7 + k)
    X = sp.random(600, 31, density=0.3, format="csr", random_state=rng, dtype=np.float32)
    X.data = rng.uniform(0.5, 2.0, X.nnz).astype(np.float32)
    X = sp.hstack([np.ones((600, 1), np.float32), X], format="csr")      # a feature every sample has
    y = (rng.random(600) < 0.3).astype(np.float32)
    data = prep.from_arrays(prep.build_arrays(X[:-100], y[:-100], X[-100:], y[-100:], 1, 16, 0), 1, 16)
    nb = 8
    hot_acc = k == 0                                   # LR caches the hot rows' accumulators, FM does not
    mc = OmegaConf.create(dict(k=k, lr=0.5, batch_size=256, replicas=4, update="chunk", inflight=nb, chunk=1,
                               warp=warp_conf(samples=1, warps_per_block=1, shards=shards, shard_hot=16, hot_cache=32),
                               optimizer="adagrad", adagrad_lr=0.05, adagrad_init=0.01))
    tr = gpu.FlowWarpTrainer(data, mc, types.SimpleNamespace(device=types.SimpleNamespace(sm_count=132)))
    assert data.d == 32 and tr.geo["HC"] == 32 and tr.geo["nw"] == nb and tr.geo["wpb"] == 1
    assert tr.geo["AHC"] == int(hot_acc)
    assert tr.nsh == shards and tr.geo["smem"] <= 16 * 4096

    _untimed(tr)
    p0 = ref.init_params(data.d, k, 0.05, 3)
    p0.w = (rng.standard_normal(data.d) * 0.1).astype(np.float32)
    p0.b = 0.3
    tr.set_params(p0)
    order = rng.permutation(data.n_chunks)[:nb * 12 - 3].astype(np.int32)   # the last step not full
    q, acc = p0.astype(np.float64), ref.init_accumulator(data.d, k, 0.01)
    want_lsum = _emulate_rr_adagrad(data.Xtr, data.ytr, q, acc, order, nb, 12, -0.5 / 256, 0.05, hot_acc)
    loss, _ = tr.epoch(order)
    err, aerr = _param_and_accumulator_errors(tr, q, acc, k)
    assert float(np.abs(q.w - p0.w).max()) > 1e-2                    # it trained
    assert err <= 1e-5, (tr.geo, err)
    assert aerr <= 1e-5 * max(1.0, float(np.abs(acc.w).max())), (tr.geo, aerr)
    assert abs(loss * data.n - want_lsum) <= 1e-4 * len(order)


def _host_adagrad_warps(monkeypatch, tmp_path, X, y, k, ws, shards, hot, inflight, hc, n_chunks):
    """A FlowWarpTrainer with AdaGrad (chunk = warp.samples = ws: a unit is a chunk) whose kernel runs
    on the host, one warp at a time, its lanes one at a time in lane order between the warp's barriers
    (so the order of their accumulator atomics is fixed); trains n_chunks chunks of a seeded order from
    seeded parameters. Returns (trainer, data, p0, summed loss, the emulation's summed loss, Params,
    accumulators, groups, largest)."""
    import sys
    import types
    from omegaconf import OmegaConf
    import pipeline.gpu.kernels as kernels
    import pipeline.gpu.transfer as transfer
    from pipeline.models.wide import gpu
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setattr(kernels, "load", _HostKernels(tmp_path, lane_serial=True).load)
    monkeypatch.setattr(transfer, "upload_all", lambda d: {key: np.ascontiguousarray(v) for key, v in d.items()})
    n_val = X.shape[0] // 10
    data = prep.from_arrays(prep.build_arrays(X[:-n_val], y[:-n_val], X[-n_val:], y[-n_val:], ws, 16, 0), ws, 16)
    wg = 32 // ws
    lens = np.diff(data.Xtr.indptr)
    # FM: every edge in registers (a tail edge's row is read at apply time, after this step's earlier
    # updates); LR: half the rows with a tail (the apply reads no parameter)
    epl = -(-int(lens.max()) // wg) if k else max(1, int(np.median(lens)) // wg)
    mc = OmegaConf.create(dict(k=k, lr=0.5, batch_size=256, replicas=4, update="chunk", inflight=inflight, chunk=ws,
                               warp=warp_conf(samples=ws, warps_per_block=1 if hc else 0, edges_per_lane=epl,
                                              shards=shards, shard_hot=hot, hot_cache=hc),
                               optimizer="adagrad", adagrad_lr=0.05, adagrad_init=0.01))
    tr = gpu.FlowWarpTrainer(data, mc, types.SimpleNamespace(device=types.SimpleNamespace(sm_count=132)))
    # LR's cached accumulators estimate the other blocks' squares: only one block keeps the sequential order
    assert tr.adagrad and tr.geo["nw"] == inflight and (not tr.geo["AHC"] or inflight == 1)
    assert k or lens.max() > wg * tr.geo["WEPL"]                       # LR: the tail loop runs
    _untimed(tr)
    rng = np.random.default_rng(k + ws + shards)
    p0 = ref.init_params(data.d, k, 0.05, 3)
    p0.w = (rng.standard_normal(data.d) * 0.1).astype(np.float32)
    p0.b = 0.3
    tr.set_params(p0)
    order = rng.permutation(data.n_chunks)[:n_chunks].astype(np.int32)
    loss, _ = tr.epoch(order)
    steps = [[r for r in range(int(c) * ws, int(c) * ws + ws) if r < data.n]
             for g in range(inflight) for c in order[g::inflight]]
    q, acc = p0.astype(np.float64), ref.init_accumulator(data.d, k, 0.01)
    lsum, groups, largest = ref.warp_adagrad_epoch(data.Xtr, data.ytr, q, acc, steps, wg, -0.5 / 256, 0.05)
    return tr, data, p0, loss * data.n, lsum, q, acc, groups, largest


@pytest.mark.skipif(GXX is None, reason="g++ is not on PATH")
@pytest.mark.parametrize("k,ws,shards,hot,inflight,hc", [
    (0, 4, 1, 0, 2, 0), (0, 8, 4, 64, 3, 0), (0, 2, 8, 16, 1, 32), (3, 4, 2, 8, 2, 0), (3, 8, 1, 0, 2, 16),
    (10, 4, 4, 32, 2, 0)])
@pytest.mark.slow
def test_warp_adagrad_samples_of_a_warp_sharing_features_in_lane_order(monkeypatch, tmp_path, k, ws, shards, hot,
                                                                       inflight, hc):
    """model.optimizer=adagrad with ws samples a warp step, one returning accumulator atomic per lane
    and edge, the warps one after another and a warp's lanes in lane order, on power-law data whose
    hot features most samples of a step share, at varying places in their rows: the pass equals a
    NumPy emulation of the atomics issued lane after lane (reference.warp_adagrad_epoch), with sharded
    hot rows and the hot-row cache (LR's cached accumulators with one block in flight)."""
    X, y = ctr_synth.generate(1000, 4000, 40, 1)
    X.data = np.random.default_rng(2).uniform(0.5, 2.0, X.nnz).astype(np.float32)
    tr, data, p0, lsum, want_lsum, q, acc, groups, largest = _host_adagrad_warps(
        monkeypatch, tmp_path, X, y, k, ws, shards, hot, inflight, hc, 200 // ws)
    assert groups > 50 * ws and largest == ws                        # many shared rows, whole warps included
    err, aerr = _param_and_accumulator_errors(tr, q, acc, k)
    assert float(np.abs(q.w - p0.w).max()) > 1e-3                    # it trained
    assert err <= 2e-6, (tr.geo, err)
    assert aerr <= 1e-5 * max(1.0, float(np.abs(acc.w).max())), (tr.geo, aerr)
    assert abs(lsum - want_lsum) <= 1e-6 * len(data.ytr)


@pytest.mark.skipif(GXX is None, reason="g++ is not on PATH")
@pytest.mark.parametrize("update,k,ws,chunk,batch,shards,hot,inflight,hc,opt", [
    ("batch", 0, 2, 32, 96, 4, 16, 0, 0, "sgd"), ("batch", 3, 4, 32, 96, 1, 0, 0, 0, "sgd"),
    ("chunk", 0, 4, 4, 32, 4, 16, 1, 0, "sgd"), ("chunk", 10, 4, 4, 32, 2, 8, 1, 16, "sgd"),
    ("chunk", 3, 1, 1, 32, 4, 16, 1, 0, "adagrad")])
@pytest.mark.slow
def test_warp_kernel_on_host_slices_equal_one_pass(monkeypatch, tmp_path, update, k, ws, chunk, batch, shards, hot,
                                                   inflight, hc, opt):
    """model.evals_per_epoch with flow design=warp (on the host as above, one warp in flight with
    update=chunk, so the pass is sequential): two shuffled epochs trained as 4 slices each, evaluated
    after every slice (which folds the shards), end where one pass an epoch does, and the slices'
    losses sum to the epoch's."""
    import sys
    import types
    from omegaconf import OmegaConf
    import pipeline.gpu.kernels as kernels
    import pipeline.gpu.transfer as transfer
    from pipeline.models.wide import gpu
    from pipeline.models.wide.model import WideTrainer
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setattr(kernels, "load", _HostKernels(tmp_path).load)
    monkeypatch.setattr(transfer, "upload_all", lambda d: {key: np.ascontiguousarray(v) for key, v in d.items()})
    rows = 1000 if update == "batch" else 400
    X, y = ctr_synth.generate(rows + 100, 3000, 30, 1)
    X.data = np.random.default_rng(2).uniform(0.5, 2.0, X.nnz).astype(np.float32)
    data = prep.from_arrays(prep.build_arrays(X[:rows], y[:rows], X[rows:], y[rows:], chunk, 16, 0), chunk, 16)
    mc = OmegaConf.create(dict(k=k, lr=0.5, batch_size=batch, replicas=4, update=update, inflight=inflight, chunk=chunk,
                               warp=warp_conf(samples=ws, warps_per_block=1 if hc else 0, shards=shards, shard_hot=hot,
                                              hot_cache=hc),
                               optimizer=opt, adagrad_lr=0.05, adagrad_init=0.01))
    step = batch // chunk
    assert -(-data.n_chunks // step) % 4                          # uneven slices

    def run(parts):
        tr = gpu.FlowWarpTrainer(data, mc, types.SimpleNamespace(device=types.SimpleNamespace(sm_count=132)))
        assert update == "batch" or tr.geo["nw"] == 1
        _untimed(tr)
        tr.set_params(ref.init_params(data.d, k, 0.05, 3))
        wt = WideTrainer("flow", "ours", tr, data, 0, True, step)
        losses, vals = [], []
        for e in range(2):
            for j in range(parts):
                if parts == 1:
                    wt.epoch(e, lambda n: None)
                else:
                    wt.epoch(e, lambda n: None, part=j, parts=parts)
                vals.append(wt.evaluate()["val_loss"])
            losses.append(wt.stats()["train_loss"])
        return tr.params(), losses, vals
    p1, l1, v1 = run(1)
    p4, l4, v4 = run(4)
    err = max(float(np.abs(p1.w - p4.w).max()), abs(p1.b - p4.b), float(np.abs(p1.V - p4.V).max()) if k else 0.0)
    assert float(np.abs(p1.w).max()) > 1e-3 and err <= 1e-6, err
    assert l4 == pytest.approx(l1, abs=1e-6) and v4[3::4] == pytest.approx(v1, abs=1e-6)


# ------------------------------------------------------------------------------- CLI

@pytest.mark.slow
def test_cli_wide_lr_cpu(cli):
    r = cli("model=wide_lr", "backend=cpu", "epochs=4", "batch_size=1024", check=True, timeout=120)
    assert "wide_lr (k=0) on a9a" in r.stdout and "cpu" in r.stdout


@pytest.mark.slow
def test_cli_wide_lr_cpu_adagrad(cli):
    r = cli("model=wide_lr", "backend=cpu", "epochs=2", "model.optimizer=adagrad", check=True, timeout=120)
    assert "adagrad" in r.stdout and "to_target_s" in r.stdout and "gpu_s" not in r.stdout   # no GPU column on the CPU


@pytest.mark.slow
def test_cli_wide_fm_cpu(cli):
    r = cli("model=wide_fm", "dataset=ctr_synth", "backend=cpu", "epochs=2", "model.k=3", "model.update=batch",
            check=True, timeout=120)
    assert "wide_fm (k=3) on ctr_synth" in r.stdout


def test_criteo10k_prepared(compose, tmp_path):
    cfg = compose(["model=wide_fm", "dataset=criteo10k", f"cache_dir={tmp_path}"])
    D = prep.prepare(cfg, 32, 128)
    assert D.n == 8000 and D.Xva.shape == (2000, 10 ** 6) and D.d == 10 ** 6
    assert np.all(np.diff(D.freq) <= 0) and D.freq[0] > 4000          # missing values are frequent
    again = prep.prepare(cfg, 32, 128)                           # from the cache
    assert np.array_equal(again.fid, D.fid) and len(list(tmp_path.iterdir())) == 1


@pytest.mark.slow
def test_cli_bad_file_exit(cli, tmp_path):
    d = tmp_path / "a9a"
    d.mkdir()
    write(d, "a9a.gz", "1 1:1\n0 500:1\n", gz=True)
    write(d, "a9a.t.gz", "1 1:1\n", gz=True)
    r = cli("model=wide_lr", "backend=cpu", f"data_dir={tmp_path}", f"cache_dir={tmp_path / 'c'}")
    assert r.returncode != 0 and "a9a.gz:2: feature index 500 exceeds the declared dimension 123" in r.stderr


@pytest.mark.slow
def test_suite_and_sanitize_configs_compose(compose):
    from pipeline.config import validate
    from pipeline import suite
    s = suite.load_all(["wide"])["wide"]
    full = suite.load(ROOT / "conf/suite/extra/wide_fullshape.yaml")
    for ov in s.bench + s.sanitize + full.bench:
        validate(compose(list(ov)))
    for exp in ("cuwide_table4", "cuwide_table5", "cuwide_a9a"):
        cfg = compose([f"experiment={exp}"])
        validate(cfg)
        assert cfg.model.name.startswith("wide_") and cfg.model.batch_size == 1024


def test_probe_window_pairs_counts_each_window_feature_once():
    """The design-independent bound of scripts/wide_probe.py counts one read + one update per
    distinct (window of W rows, feature >= hot) pair: checked against a plain Python count."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("wide_probe", Path(__file__).resolve().parents[1]
                                                  / "scripts" / "wide_probe.py")
    wp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wp)
    rng = np.random.default_rng(5)
    X = sp.random(23, 40, density=0.3, format="csr", random_state=rng)
    X.data[:] = 1.0
    for window, hot in ((1, 0), (4, 3), (5, 10), (23, 0), (100, 39)):
        got = wp.window_pairs(X, window, hot)
        want = []
        for w0 in range(0, X.shape[0], window):
            feats = set(X[w0:w0 + window].indices.tolist())
            want += sorted(f for f in feats if f >= hot)
        assert got.tolist() == want, (window, hot)


@pytest.mark.parametrize("var", ["PIPELINE_CUDA_TOOL", "CUDA_INJECTION64_PATH"])
def test_publication_probe_is_skipped_under_a_cuda_tool(monkeypatch, var):
    """Under compute-sanitizer (gpu_suite sets PIPELINE_CUDA_TOOL) the grid-barrier probe is not run:
    racecheck does not keep its blocks resident, so it would spin; x_of_step_bound is NaN, and said."""
    import math
    import types
    from pipeline.models.wide import gpu
    monkeypatch.delenv("PIPELINE_CUDA_TOOL", raising=False)
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    monkeypatch.setenv(var, "compute-sanitizer racecheck")
    monkeypatch.setattr(gpu, "_PUBLISH", {})
    notes = []
    ctx = types.SimpleNamespace(device=types.SimpleNamespace(index=0, sm_count=132), notice=notes.append)
    assert all(math.isnan(v) for v in gpu.publication_us(ctx))
    assert len(notes) == 1 and var in notes[0] and "x_of_step_bound is NaN" in notes[0]
