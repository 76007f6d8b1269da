"""BCM on a GPU: every variant (ours and the dense baselines) against the float64 dense reference,
on fresh random inputs, at shapes that need padding and are not multiples of 32."""
import numpy as np
import pytest

from pipeline.bench import Case, compare
from pipeline.models.bcm import reference as ref

pytestmark = pytest.mark.gpu

VARIANTS = ["baseline", "o1", "o2", "fused", "tiled", "cgemm", "dft", "dft3m", "dense_fp32", "dense_tf32"]
FC_SHAPES = [(7, 100, 200, 16), (33, 64, 96, 32), (5, 100, 130, 64), (130, 256, 512, 16)]


def fc_case(n, out, inp, k):
    r = np.random.default_rng(np.random.SeedSequence().entropy)
    p, q, out_p, in_p = ref.blocks(out, inp, k)
    x = np.zeros((n, in_p), np.float32)
    x[:, :inp] = r.standard_normal((n, inp))            # zero padding of the features
    w = (r.standard_normal((p, q, k)) / np.sqrt(q * k)).astype(np.float32)
    b = r.standard_normal(p * k).astype(np.float32)
    g = r.standard_normal((n, out_p)).astype(np.float32)
    return Case(f"fc {n}x{inp}->{out} k={k}", dict(n=n, p=p, q=q, k=k), dict(x=x, w=w, bias=b, g=g),
                lambda: ref.fc_reference(x, w, b, g))


def conv_case(k):
    r = np.random.default_rng(np.random.SeedSequence().entropy)
    s = ref.ConvShape(n=3, h=7, w=5, c=k, cout=2 * k)
    p, q = s.cout // k, s.cols // k
    x = r.standard_normal((s.n, s.h, s.w, s.c)).astype(np.float32)
    w = (r.standard_normal((p, q, k)) / np.sqrt(q * k)).astype(np.float32)
    b = r.standard_normal(p * k).astype(np.float32)
    g = r.standard_normal((s.n, s.ho, s.wo, s.cout)).astype(np.float32)
    return Case(f"conv k={k}", dict(n=s.rows, p=p, q=q, k=k), dict(x=x, w=w, bias=b, g=g, conv=s),
                lambda: ref.conv_reference(x, w, b, g, s))


@pytest.fixture(scope="module")
def table():
    from pipeline.gpu import device
    device.init(0)
    from pipeline.models.bcm import gpu
    return gpu.variants()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", FC_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fc_variant_matches_reference(table, variant, shape, gpu_ctx):
    case = fc_case(*shape)
    v = table[variant]
    run = v.build(case, gpu_ctx)
    for _ in range(2):                                   # the second call reuses buffers and plans
        errs = (v.check or compare)(run(), case.expected())
        tol = v.tolerance or 1e-4
        assert all(e <= tol for e in errs.values()), errs


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("k", [16, 32])
def test_conv_variant_matches_reference(table, variant, k, gpu_ctx):
    case = conv_case(k)
    v = table[variant]
    errs = (v.check or compare)(v.build(case, gpu_ctx)(), case.expected())
    assert all(e <= (v.tolerance or 1e-4) for e in errs.values()), errs


def test_im2col_col2im_and_bias_grad_match_numpy(table):
    import cupy
    from pipeline.models.bcm import gpu
    r = np.random.default_rng()
    s = ref.ConvShape(n=2, h=6, w=5, c=3, cout=4, pad=1, stride=2)
    x = r.standard_normal((s.n, s.h, s.w, s.c)).astype(np.float32)
    cols = gpu.im2col(cupy.asarray(x), s)
    assert np.allclose(cupy.asnumpy(cols), ref.im2col(x, s))
    c = r.standard_normal((s.rows, s.cols)).astype(np.float32)
    assert np.allclose(cupy.asnumpy(gpu.col2im(cupy.asarray(c), s)), ref.col2im(c, s), atol=1e-5)
    g = r.standard_normal((1000, 77)).astype(np.float32)
    db = cupy.full(77, np.nan, cupy.float32)
    gpu.bias_grad(cupy.asarray(g), db)
    assert np.allclose(cupy.asnumpy(db), g.sum(0), rtol=1e-4, atol=1e-3)


def test_cli_gpu_default_run(cli):
    r = cli("model=bcm", "block_size=64", "model.layers=[C]", "bench.min_repeats=3", check=True)
    assert "FAIL" not in r.stdout and "fused" in r.stdout and "dense_fp32" in r.stdout


def test_measure_with_cuda_graph_checks_the_replay(table, gpu_ctx):
    """The graph replay, not only the eager warm-up, must produce the checked outputs."""
    from pipeline.bench import measure
    case = fc_case(9, 96, 160, 32)
    rows = measure([case], [table["tiled"], table["fused"], table["dense_fp32"]], gpu_ctx, 1e-4,
                   speedup_over=["dense_fp32"])
    assert all(r["graph"] == "yes" and r["ok"] for r in rows), rows
    assert "x_vs_dense_fp32" in rows[0]
