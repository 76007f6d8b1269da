"""BCM on a GPU: every variant (ours and the dense baselines) against the float64 dense reference,
on fresh random inputs, at shapes that need padding and are not multiples of 32."""
import numpy as np
import pytest

from pipeline.bench import Case, compare
from pipeline.models.bcm import reference as ref

pytestmark = pytest.mark.gpu

VARIANTS = ["baseline", "o1", "o2", "fused", "tiled", "cgemm", "dft", "dft3m", "rfft", "rfft_tf32", "dense_fp32",
            "dense_tf32"]
FC_SHAPES = [(7, 100, 200, 16), (33, 64, 96, 32), (5, 100, 130, 64), (130, 256, 512, 16)]
RFFT = ["rfft", "rfft_tf32"]


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


def conv_case(k, s=None):
    r = np.random.default_rng(np.random.SeedSequence().entropy)
    s = s or ref.ConvShape(n=3, h=7, w=5, c=k, cout=2 * k)
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


@pytest.mark.parametrize("variant", RFFT)
@pytest.mark.parametrize("k,shape", [
    (8, dict(n=2, h=6, w=9, c=24, cout=40)),                          # odd channel blocks (3 in, 5 out)
    (8, dict(n=2, h=5, w=5, c=136, cout=72)),                         # weight gradient: 385 2x2 micro-tiles
    (16, dict(n=3, h=7, w=7, c=32, cout=48, stride=2)),              # strided: taps between strides skip
    (32, dict(n=2, h=5, w=4, c=64, cout=96, kh=1, kw=3, pad=0)),     # a 1 x 3 window without padding
    (64, dict(n=4, h=14, w=14, c=256, cout=128)),                    # layer B's window and channels, smaller
], ids=lambda v: str(v) if isinstance(v, int) else "")
def test_conv_without_im2col_matches_reference(table, variant, k, shape, gpu_ctx):
    """The rfft variants' conv path (spectra per pixel, window gathered in the products, col2im in
    the frequency domain) at shapes with odd block counts, strides and a non-square window."""
    case = conv_case(k, ref.ConvShape(**shape))
    v = table[variant]
    run = v.build(case, gpu_ctx)
    for _ in range(2):
        errs = (v.check or compare)(run(), case.expected())
        assert all(e <= (v.tolerance or 1e-4) for e in errs.values()), errs


@pytest.mark.parametrize("k", [8, 16, 32, 64, 128])
def test_register_fft_kernels_match_numpy(table, k):
    """rfft.cu's transforms (k <= 64; k = 128 takes bcm.cu's DFT kernels) against NumPy: conjugate,
    bias with a row modulus, time reversal, three row sets a launch."""
    import cupy
    from pipeline.models.bcm import gpu
    r = np.random.default_rng()
    layer = gpu.BcmLinear(1, 1, k, "rfft")
    kf = k // 2 + 1
    xs = [r.standard_normal((rows, k)).astype(np.float32) for rows in (100, 37, 64)]
    outs = [cupy.full((kf, x.shape[0]), np.nan, cupy.complex64) for x in xs]
    layer._dft_rows([(cupy.asarray(x), o, c) for x, o, c in zip(xs, outs, (0, 1, 0))])
    for x, o, c in zip(xs, outs, (0, 1, 0)):
        want = np.fft.rfft(x.astype(np.float64), axis=1).T
        assert np.allclose(cupy.asnumpy(o), np.conj(want) if c else want, atol=2e-5 * k), (k, c)
    Rs = [(r.standard_normal((kf, rows)) + 1j * r.standard_normal((kf, rows))).astype(np.complex64)
          for rows in (70, 3, 129)]
    bias = r.standard_normal(3 * k).astype(np.float32)
    ys = [cupy.full((R.shape[1], k), np.nan, cupy.float32) for R in Rs]
    segs = [(cupy.asarray(Rs[0]), ys[0], cupy.asarray(bias), 3, 0), (cupy.asarray(Rs[1]), ys[1], None, 1, 1),
            (cupy.asarray(Rs[2]), ys[2], None, 1, 0)]
    layer._idft_rows(segs)
    for R, y, (_, _, b, bmod, rev) in zip(Rs, ys, segs):
        want = np.fft.irfft(R.T.astype(np.complex128), n=k, axis=1)
        if rev:
            want = want[:, (-np.arange(k)) % k]
        if b is not None:
            want = want + bias.reshape(3, k)[np.arange(R.shape[1]) % 3]
        assert np.allclose(cupy.asnumpy(y), want, atol=1e-5), (k, rev)


def test_tf32_cgemm_matches_numpy_to_tf32_precision(table):
    import cupy
    from pipeline.gpu import blas
    r = np.random.default_rng()
    a = (r.standard_normal((5, 40, 24)) + 1j * r.standard_normal((5, 40, 24))).astype(np.complex64)
    b = (r.standard_normal((5, 32, 24)) + 1j * r.standard_normal((5, 32, 24))).astype(np.complex64)
    out = cupy.full((5, 40, 32), np.nan, cupy.complex64)
    blas.cgemm_batched(cupy.asarray(a), cupy.asarray(b), out, trans_b=True, precision="tf32")
    want = np.einsum("bmk,bnk->bmn", a.astype(np.complex128), b.astype(np.complex128))
    err = np.linalg.norm(cupy.asnumpy(out) - want) / np.linalg.norm(want)
    assert err < 5e-3, err                 # TF32 operands: ~1e-3 at most


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
    assert "FAIL" not in r.stdout and "dense_fp32" in r.stdout and "dense_tf32" in r.stdout
    rows = [ln.split() for ln in r.stdout.splitlines()]
    timed = {c for row in rows for c in row}
    assert {"fused", "rfft"} <= timed, r.stdout      # the paper's variant and the project's best, side by side


def test_measure_with_cuda_graph_checks_the_replay(table, gpu_ctx):
    """The graph replay, not only the eager warm-up, must produce the checked outputs."""
    from pipeline.bench import measure
    case = fc_case(9, 96, 160, 32)
    rows = measure([case], [table["tiled"], table["fused"], table["dense_fp32"]], gpu_ctx, 1e-4,
                   speedup_over=["dense_fp32"])
    assert all(r["graph"] == "yes" and r["ok"] for r in rows), rows
    assert "x_vs_dense_fp32" in rows[0]
