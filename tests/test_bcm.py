"""BCM on the CPU: the reference math against dense circulant matrices, the NumPy FFT backend,
im2col/col2im, config checks and the CLI."""
import numpy as np
import pytest

from pipeline.models.bcm import reference as ref


def rng():
    return np.random.default_rng(np.random.SeedSequence().entropy)   # fresh inputs every run


def test_dense_weight_is_circulant_first_column():
    w = rng().standard_normal((2, 3, 5))
    W = ref.dense_weight(w)
    for i in range(2):
        for j in range(3):
            blk = W[i * 5:(i + 1) * 5, j * 5:(j + 1) * 5]
            assert np.allclose(blk[:, 0], w[i, j])                    # first column is the vector
            assert np.allclose(blk[1:, 1:], blk[:-1, :-1])             # constant diagonals
            assert np.allclose(blk[0, 1:], w[i, j, :0:-1])             # wraps around


@pytest.mark.parametrize("p,q,k,n", [(3, 5, 16, 7), (2, 2, 64, 3), (1, 4, 4, 1)])
def test_fft_matches_dense_reference(p, q, k, n):
    r = rng()
    x = r.standard_normal((n, q * k)).astype(np.float32)
    w = r.standard_normal((p, q, k)).astype(np.float32)
    b = r.standard_normal(p * k).astype(np.float32)
    g = r.standard_normal((n, p * k)).astype(np.float32)
    exp = ref.fc_reference(x, w, b, g)
    got = ref.fc_fft(x, w, b, g)
    for key in exp:
        err = np.linalg.norm(got[key] - exp[key]) / np.linalg.norm(exp[key])
        assert err < 1e-5, (key, err)


def test_gradients_match_finite_differences():
    r = rng()
    p, q, k, n = 2, 3, 8, 4
    x, w, b, g = (r.standard_normal(s) for s in ((n, q * k), (p, q, k), (p * k,), (n, p * k)))
    out = ref.fc_reference(x, w, b, g)
    loss = lambda x_, w_, b_: float((ref.fc_reference(x_, w_, b_, g)["a"] * g).sum())  # noqa: E731
    base, eps = loss(x, w, b), 1e-6
    for idx in [(0, 1, 2), (1, 2, 7)]:
        w2 = w.copy(); w2[idx] += eps
        assert abs((loss(x, w2, b) - base) / eps - out["dw"][idx]) < 1e-4
    x2 = x.copy(); x2[2, 5] += eps
    assert abs((loss(x2, w, b) - base) / eps - out["dx"][2, 5]) < 1e-4
    b2 = b.copy(); b2[3] += eps
    assert abs((loss(x, w, b2) - base) / eps - out["db"][3]) < 1e-4


def test_im2col_col2im_are_adjoint_and_conv_matches_direct():
    r = rng()
    s = ref.ConvShape(n=2, h=5, w=4, c=3, cout=8, kh=3, kw=3, pad=1)
    x = r.standard_normal((s.n, s.h, s.w, s.c))
    c = r.standard_normal((s.rows, s.cols))
    assert np.isclose((ref.im2col(x, s) * c).sum(), (x * ref.col2im(c, s)).sum())
    # conv through im2col equals a direct convolution with the dense weight
    k = 4
    s2 = ref.ConvShape(n=2, h=5, w=4, c=4, cout=8)
    p, q = s2.cout // k, s2.cols // k
    w = r.standard_normal((p, q, k))
    W = ref.dense_weight(w)                       # (cout, kh*kw*c) with (kh, kw, c) order
    x = r.standard_normal((s2.n, s2.h, s2.w, s2.c))
    b = r.standard_normal(s2.cout)
    g = r.standard_normal((s2.n, s2.ho, s2.wo, s2.cout))
    out = ref.conv_reference(x, w, b, g, s2)
    xp_ = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    Wk = W.reshape(s2.cout, 3, 3, s2.c)
    direct = np.zeros_like(out["a"])
    for i in range(3):
        for j in range(3):
            direct += np.einsum("nhwc,oc->nhwo", xp_[:, i:i + s2.ho, j:j + s2.wo, :], Wk[:, i, j, :])
    assert np.allclose(out["a"], direct + b)
    got = ref.conv_fft(x.astype(np.float32), w.astype(np.float32), b.astype(np.float32), g.astype(np.float32), s2)
    for key in out:
        assert np.linalg.norm(got[key] - out[key]) / np.linalg.norm(out[key]) < 1e-5, key


def test_padding_to_multiple_of_k():
    assert ref.blocks(100, 200, 16) == (7, 13, 112, 208)
    assert ref.blocks(4096, 8192, 64) == (64, 128, 4096, 8192)


def test_cases_small_preset_all_layers(compose):
    """size=small: model.small's shapes replace Table 3's (the layers the CPU times), every k fits."""
    from pipeline.config import apply_small_preset
    from pipeline.models.bcm.model import make_case
    cfg = compose(["model=bcm"])
    assert (cfg.model.shapes.A.out, cfg.model.shapes.A.inp, cfg.model.shapes.B.c) == (4096, 8192, 256)
    line = apply_small_preset(cfg)
    shapes = cfg.model.shapes
    assert (shapes.A.out, shapes.A.inp, shapes.B.h, shapes.B.c, shapes.B.cout, shapes.C.out) == \
        (256, 512, 4, 64, 64, 128)
    assert line.startswith("size=small: model shapes={A: {out: 256, inp: 512}, B: {h: 4, w: 4, c: 64, cout: 64}, ")
    r = np.random.default_rng(0)
    for layer in "ABC":
        for k in (16, 32, 64):
            c = make_case(layer, shapes[layer], k, 8, r)
            assert c.params["k"] == k and c.params["p"] >= 1
    assert make_case("B", shapes.B, 16, 8, r).inputs["x"].shape == (4, 4, 4, 64)      # conv: half the batch


@pytest.mark.parametrize("override,msg", [
    ("block_size=48", "block_size=48 is not allowed: a power of two"),
    ("model.layers=[Z]", "model.layers='Z' is not allowed: a layer of model.shapes (A, B, C)"),
    ("model.shapes.A.type=lstm", "model.shapes.A.type='lstm' is not allowed: fc or conv"),
    ("kernel=o1 model.baselines=[nope]", "model.baselines='nope' is not allowed"),
])
def test_config_errors_are_one_line(cli, override, msg):
    r = cli(*override.split(), "backend=cpu")
    assert r.returncode != 0
    err = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert len(err) == 1 and msg in err[0], r.stderr


@pytest.mark.slow
def test_cli_cpu_runs_all_layers_and_logs(cli, tmp_path):
    r = cli("model=bcm", "backend=cpu", "experiment=bcm_layers", "bench.min_repeats=2", "bench.min_time_ms=1",
            check=True, timeout=300)
    assert "NumPy" in r.stderr or "CPU" in r.stderr
    for case in ("A k=16", "B k=32", "C k=64"):
        assert case in r.stdout
    assert "FAIL" not in r.stdout
    import mlflow
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["bcm"])
    assert len(runs) == 1 and runs.iloc[0]["status"] == "FINISHED"
    assert any(c.startswith("metrics.summary/") for c in runs.columns)


def test_experiment_composes(compose):
    cfg = compose(["experiment=bcm_layers"])
    assert list(cfg.model.block_sizes) == [16, 32, 64] and list(cfg.model.layers) == ["A", "B", "C"]
    assert "tiled" in cfg.model.variants


@pytest.mark.parametrize("overrides,want", [
    ([], ["fused", "rfft"]),                                    # the headline: paper's variant + project's best
    (["kernel=dft"], ["dft"]),                                   # kernel= times that one variant
    (["kernel=bcm_default"], ["fused", "rfft"]),
    (["model.variants=[tiled,rfft_tf32]"], ["tiled", "rfft_tf32"]),
])
def test_default_times_the_papers_variant_and_the_best(compose, overrides, want):
    from pipeline.models.bcm.variants import PAPER, REGISTRY
    cfg = compose(["model=bcm", *overrides])
    assert REGISTRY.check(cfg) == want
    assert list(cfg.model.baselines) == ["dense_fp32", "dense_tf32"]
    if not overrides:
        assert PAPER in want


def test_default_on_cpu_runs_the_numpy_pair(compose, tmp_path):
    """The default's GPU variants become the CPU backend's cpu_fft against cpu_dense, with a notice."""
    from pipeline.config import validate
    from pipeline.context import make_context
    from pipeline.models.bcm.model import BcmModel
    cfg = compose(["model=bcm", "backend=cpu", "progress=false", f"cache_dir={tmp_path / 'c'}"])
    validate(cfg)
    ctx = make_context(cfg, tmp_path)
    m = BcmModel(cfg, ctx)
    m.prepare()
    assert [v.name for v in m.variants] == ["cpu_fft", "cpu_dense"]
    assert any("fused" in n and "rfft" in n for n in ctx.notices), ctx.notices


def test_bad_name_in_the_default_list_is_refused(compose):
    from omegaconf import open_dict
    from pipeline.config import validate
    from pipeline.errors import ConfigError
    cfg = compose(["model=bcm"])
    with open_dict(cfg):
        cfg.kernel.variants = ["fused", "nope"]
    with pytest.raises(ConfigError, match=r"kernel.variants='nope' is not allowed"):
        validate(cfg)
