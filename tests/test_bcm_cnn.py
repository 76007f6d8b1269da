"""model=bcm_cnn on the CPU: config, the network's gradients against finite differences, the
datasets, and training runs through the CLI (digits always; MNIST/CIFAR-10 when present)."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.errors import ConfigError, DataError
from pipeline.models.bcm import reference as ref
from pipeline.models.bcm_cnn.net import ARCHS, Net

# conv (dense) -> conv (BCM, output padded 6 -> 8) -> pool -> fc (BCM, input 54 -> 56, output 10 -> 12) -> fc
TINY = [("conv", 8, False), ("relu",), ("conv", 6, True), ("relu",), ("pool",), ("flatten",),
        ("fc", 10, True), ("relu",), ("fc", 5, False)]


def _tiny(k=4, bcm=True, seed=0):
    net = Net(TINY, (6, 6, 2), bcm, k, dtype=np.float64)
    net.init(seed)
    rng = np.random.default_rng(seed + 1)
    for lin in net.linears:      # non-zero biases so their gradients are exercised too
        lin.b[...] = 0.1 * rng.standard_normal(lin.b.shape)
    return net


@pytest.mark.parametrize("bcm,k", [(True, 4), (True, 2), (False, 4)])
def test_network_gradients_match_finite_differences(bcm, k):
    net = _tiny(k, bcm)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 6, 6, 2))
    y = rng.integers(0, 5, 3)
    loss, g = net.loss(net.forward(x), y)
    net.backward(g)
    eps = 1e-6
    for (name, p), grad in zip(net.params(), net.grads):
        assert grad.shape == p.shape, name
        flat = p.reshape(-1)
        gflat = grad.reshape(-1)
        picks = rng.choice(flat.size, size=min(flat.size, 12), replace=False)
        fd = np.empty(len(picks))
        for j, i in enumerate(picks):
            old = flat[i]
            flat[i] = old + eps
            lp, _ = net.loss(net.forward(x), y)
            flat[i] = old - eps
            lm, _ = net.loss(net.forward(x), y)
            flat[i] = old
            fd[j] = (lp - lm) / (2 * eps)
        an = gflat[picks]
        err = np.linalg.norm(fd - an) / max(np.linalg.norm(fd), 1e-12)
        assert err < 1e-6 or np.linalg.norm(fd) < 1e-10 and np.linalg.norm(an) < 1e-10, (name, err)
    # the analytic gradient is not trivially zero
    assert sum(float(np.abs(gr).sum()) for gr in net.grads) > 1e-3


def test_bcm_layer_is_the_dense_circulant_matrix_with_padding():
    net = _tiny(4, True)
    lin = net.linears[2]                     # fc 54 -> 10, padded to 56 -> 12
    assert (lin.in_f, lin.in_p, lin.out_f, lin.out_p) == (54, 56, 10, 12)
    x = np.random.default_rng(0).standard_normal((5, 54))
    W = ref.dense_weight(lin.W)[:10, :54]
    np.testing.assert_allclose(lin.forward(x), x @ W.T + lin.b[:10], rtol=1e-10, atol=1e-12)


def test_seeded_init_is_reproducible_and_shared_by_dense_layers():
    a, b = Net(ARCHS["digits"], (8, 8, 1), True, 16), Net(ARCHS["digits"], (8, 8, 1), True, 16)
    d = Net(ARCHS["digits"], (8, 8, 1), False, 16)
    a.init(5), b.init(5), d.init(5)
    for (n1, p1), (_, p2) in zip(a.params(), b.params()):
        np.testing.assert_array_equal(p1, p2, err_msg=n1)
    np.testing.assert_array_equal(a.linears[0].W, d.linears[0].W)      # conv1 is dense in both
    np.testing.assert_array_equal(a.linears[-1].W, d.linears[-1].W)    # so is the classifier
    c = Net(ARCHS["digits"], (8, 8, 1), True, 16)
    c.init(6)
    assert not np.array_equal(a.linears[1].W, c.linears[1].W)
    assert a.bcm_layers() == ["conv2", "fc6"] and d.bcm_layers() == []


def test_softmax_cross_entropy_and_pool():
    net = _tiny()
    logits = np.array([[1.0, 2.0, 3.0, 0.0, 0.0]])
    loss, g = net.loss(logits, np.array([2]))
    p = np.exp(logits) / np.exp(logits).sum()
    assert loss == pytest.approx(-np.log(p[0, 2]))
    np.testing.assert_allclose(g, p - np.eye(5)[[2]])


# ------------------------------------------------------------------------------------ config


@pytest.mark.slow
def test_compose_defaults_and_experiment(compose):
    cfg = compose(["model=bcm_cnn", "block_size=16"])
    assert cfg.dataset.name == "cifar10" and cfg.kernel.name == "tiled"
    assert cfg.model.block_size == 16 and cfg.model.dense_baseline
    cfg = compose(["experiment=bcm_cifar10_accuracy"])
    assert list(cfg.model.block_sizes) == [16, 32, 64] and cfg.model.name == "bcm_cnn"
    assert cfg.dataset.name == "cifar10"
    for ds in ("mnist", "digits"):
        assert compose(["model=bcm_cnn", f"dataset={ds}"]).dataset.name == ds
    for v in ("fused", "tiled", "o1", "o2", "baseline", "cgemm", "cpu"):
        compose(["model=bcm_cnn", f"kernel={v}"])


@pytest.mark.parametrize("override,key", [
    ("block_size=12", "block_size"), ("block_size=128", "block_size"), ("dataset=bcm_default", "dataset"),
    ("model.precision=fp16", "model.precision"), ("model.lr=0", "model.lr"), ("kernel=dense_fp32", "kernel"),
    ("model.momentum=1.5", "model.momentum"),
])
def test_schema_errors(compose, override, key):
    from pipeline.config import validate
    cfg = compose(["model=bcm_cnn", override])
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(cfg)


def test_unknown_key_rejected(cli):
    r = cli("model=bcm_cnn", "dataset=digits", "backend=cpu", "model.nonsense=1")
    assert r.returncode != 0 and "nonsense" in (r.stdout + r.stderr)


# ------------------------------------------------------------------------------------ training


@pytest.mark.slow
def test_cli_digits_trains_bcm_and_dense(cli, tmp_path):
    r = cli("model=bcm_cnn", "dataset=digits", "backend=cpu", "block_size=16", "epochs=4", "kernel=fused",
            "model.min_accuracy=0.6")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "needs a GPU" in out and "[BCM]" in out and "acc_gap_pct" in out
    assert "bcm_k16 epoch 4/4" in out and "dense epoch 4/4" in out
    import mlflow
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["bcm_cnn"])
    assert len(runs) == 1 and runs.iloc[0]["status"] == "FINISHED"
    row = runs.iloc[0]
    assert row["metrics.summary/dense/test_acc_pct"] > 60
    assert row["metrics.summary/bcm_k16/test_acc_pct"] > 60
    assert np.isfinite(row["metrics.summary/bcm_k16/acc_gap_pct"])
    assert np.isfinite(row["metrics.summary/bcm_k16/time_vs_dense"])
    hist = mlflow.tracking.MlflowClient().get_metric_history(row["run_id"], "bcm_k16/test_acc")
    assert len(hist) == 4


@pytest.mark.slow
def test_cli_block_size_sweep_and_accuracy_check(cli):
    r = cli("-m", "model=bcm_cnn", "dataset=digits", "backend=cpu", "epochs=1", "model.train_limit=256",
            "model.test_limit=100", "model.dense_baseline=false", "block_size=8,32")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "sweep summary" in out and "bcm_k8/test_acc_pct" in out and "bcm_k32/test_acc_pct" in out
    # an impossible accuracy floor fails the run (exit 4)
    r = cli("model=bcm_cnn", "dataset=digits", "backend=cpu", "epochs=1", "model.train_limit=128",
            "model.test_limit=50", "model.min_accuracy=1.0", "model.dense_baseline=false")
    assert r.returncode == 4, r.stdout + r.stderr


# ------------------------------------------------------------------------------- real datasets


def _data_cfg(compose, tmp_path):
    return compose(["model=bcm_cnn", f"cache_dir={tmp_path}/cache"])


@pytest.mark.slow
def test_cifar10_loader_decodes_and_caches(compose, tmp_path):
    from pipeline.data import cifar10
    cfg = _data_cfg(compose, tmp_path)
    try:
        x, y = cifar10.load(cfg, "test")
    except DataError as e:
        pytest.skip(f"CIFAR-10 not available: {e}")
    assert x.shape == (10000, 32, 32, 3) and x.dtype == np.uint8
    assert np.bincount(y).tolist() == [1000] * 10
    assert list((tmp_path / "cache").glob("cifar10-test-*.npz"))
    x2, y2 = cifar10.load(cfg, "test")            # from the cache
    np.testing.assert_array_equal(x, x2)
    mean = x.reshape(-1, 3).mean(0)
    assert np.all(np.abs(mean - np.array([124.7, 122.7, 113.9])) < 4)


def test_cifar10_corrupt_pack_is_a_data_error(tmp_path):
    from pipeline.data import cifar10
    bad = tmp_path / "bad.npz"
    np.savez(bad, jpeg=np.zeros(10, np.uint8), offsets=np.array([0, 5, 10]), labels=np.array([0, 1], np.uint8))
    with pytest.raises(DataError, match="bad.npz: image 0"):
        cifar10.decode(bad)


@pytest.mark.slow
def test_cli_mnist_small(cli, compose):
    from pipeline.data import mnist
    try:
        mnist.load(compose(["model=bcm_cnn"]), "test")
    except DataError as e:
        pytest.skip(f"MNIST not available: {e}")
    r = cli("model=bcm_cnn", "dataset=mnist", "backend=cpu", "block_size=32", "epochs=1",
            "model.train_limit=512", "model.test_limit=200")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "conv288-64[BCM]" in r.stdout + r.stderr


def test_image_counts_come_from_the_dataset_and_its_small_preset(compose, monkeypatch):
    """dataset.train_images / test_images limit the images (0: all; on size=small cifar10's and
    mnist's dataset.small set them, digits has none); model.train_limit / test_limit win; a stand-in
    (dataset.fallback) is not limited by the dataset it stands in for."""
    from pipeline.config import apply_small_preset
    from pipeline.models.bcm_cnn import data
    x = np.random.default_rng(0).random((2000, 4, 4, 1), np.float32)
    y = np.arange(2000) % 10
    monkeypatch.setattr(data, "_raw", lambda cfg, name: (x, y, x[:800], y[:800]))
    sizes = lambda cfg, name: tuple(len(s.y) for s in data.load(cfg, name, 0))      # noqa: E731
    cfg = compose(["model=bcm_cnn", "dataset=mnist"])
    assert sizes(cfg, "mnist") == (2000, 800)
    assert apply_small_preset(cfg, "dataset").startswith("size=small: dataset train_images=1000 test_images=500")
    assert sizes(cfg, "mnist") == (1000, 500)
    cfg.model.train_limit, cfg.model.test_limit = 300, 20
    assert sizes(cfg, "mnist") == (300, 20)
    cfg = compose(["model=bcm_cnn"])                        # CIFAR-10, digits when it is not there
    apply_small_preset(cfg, "dataset")
    assert (cfg.dataset.train_images, cfg.dataset.test_images) == (64, 64) and cfg.dataset.fallback == "digits"
    assert sizes(cfg, "cifar10") == (64, 64) and sizes(cfg, "digits") == (2000, 800)
    cfg = compose(["model=bcm_cnn", "dataset=digits"])
    assert apply_small_preset(cfg, "dataset") is None and sizes(cfg, "digits") == (2000, 800)


# ------------------------------------------------------------------------------ the training harness


def _model(compose, tmp_path, *overrides):
    from pipeline.config import validate
    from pipeline.context import make_context
    from pipeline.models.bcm_cnn.model import BcmCnnModel
    cfg = compose(["model=bcm_cnn", "dataset=digits", "backend=cpu", "progress=false", "block_size=16",
                   "model.train_limit=256", "model.test_limit=64", f"cache_dir={tmp_path / 'cache'}", *overrides])
    validate(cfg)
    model = BcmCnnModel(cfg, make_context(cfg, tmp_path))
    model.prepare()
    return model


def test_networks_train_through_the_harness(compose, tmp_path, monkeypatch):
    """Each network is a trainer of pipeline.train.fit (built when its turn comes); the epochs are
    logged live under the series' names, and the ratios against dense come from speedups()."""
    from pipeline.models.bcm_cnn import model as cnn
    calls = []

    def spy(ctx, trainers, epochs, **kw):
        calls.append((len(trainers), epochs, kw["watch"]))
        return fit(ctx, trainers, epochs, **kw)
    fit = cnn.fit
    monkeypatch.setattr(cnn, "fit", spy)
    m = _model(compose, tmp_path, "epochs=2")
    m.execute()
    assert calls == [(2, 2, ("train_loss",))]
    assert list(m.results) == ["dense", "bcm_k16"]
    for tag, r in m.results.items():
        assert set(r["hist"]) == {"train_loss", "test_acc", "epoch_ms", "layer_ms"} and r["failure"] is None
        assert len(r["hist"]["test_acc"]) == 2 and all(0 < s for s in r["hist"]["epoch_ms"])
        assert all(0 < l <= e for l, e in zip(r["hist"]["layer_ms"], r["hist"]["epoch_ms"]))
        assert [s for s, _ in m.ctx.epochs[f"{tag}/test_acc"]] == [0, 1]
    m.verify()
    rep = m.report()
    row = next(r for r in rep.rows if r["network"] == "bcm_k16")
    assert row["x_vs_dense"] == pytest.approx(1.0 / row["time_vs_dense"])
    assert row["time_vs_dense"] == pytest.approx(row["epoch_ms"] / rep.rows[0]["epoch_ms"])
    assert row["layer_time_vs_dense"] == pytest.approx(row["layer_ms"] / rep.rows[0]["layer_ms"])
    assert rep.metrics["summary/bcm_k16/x_vs_dense"] == pytest.approx(row["x_vs_dense"])


def test_a_diverging_network_stops_and_fails(compose, tmp_path):
    m = _model(compose, tmp_path, "epochs=3", "model.lr=1e30", "model.clip_norm=0", "model.dense_baseline=false")
    with np.errstate(all="ignore"):
        m.execute()
        m.verify()
    r = m.results["bcm_k16"]
    assert len(r["hist"]["train_loss"]) < 3
    assert r["failure"] == f"bcm_k16: training loss became nan in epoch {len(r['hist']['train_loss'])} (lower model.lr)"
    assert r["failure"] in m.failures
