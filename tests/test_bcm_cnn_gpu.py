"""model=bcm_cnn on the GPU: the whole network (our BCM kernels of every variant, cuBLAS, our
im2col/col2im, the CuPy glue) against the float64 NumPy network, and training runs."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.bench import rel_error
from pipeline.models.bcm_cnn.net import Net

pytestmark = pytest.mark.gpu

# dense conv -> BCM conv (144 = 9 x 16 im2col columns) -> pool -> BCM fc 512 -> 40 (output padded to 48)
# -> dense fc; k = 16
SPEC = [("conv", 16, False), ("relu",), ("conv", 32, True), ("relu",), ("pool",), ("flatten",),
        ("fc", 40, True), ("relu",), ("fc", 10, False)]
VARIANTS = ["tiled", "fused", "o1", "o2", "baseline", "cgemm", "dft", "rfft"]


def _pair(variant, bcm=True, k=16):
    cpu = Net(SPEC, (8, 8, 3), bcm, k, dtype=np.float64)
    gpu = Net(SPEC, (8, 8, 3), bcm, k, cuda=True, variant=variant)
    cpu.init(3)
    gpu.init(3)
    rng = np.random.default_rng(4)
    for lc, lg in zip(cpu.linears, gpu.linears):
        b = (0.1 * rng.standard_normal(lc.b.shape)).astype(np.float32)
        lc.b[...] = b
        lg.b[...] = gpu.xp.asarray(b)
        np.testing.assert_array_equal(lc.W.astype(np.float32), lg.W.get())
    return cpu, gpu


@pytest.mark.parametrize("variant", VARIANTS + ["dense"])
def test_network_step_matches_float64_cpu(gpu_ctx, variant):
    import cupy
    cpu, gpu = _pair("tiled" if variant == "dense" else variant, bcm=variant != "dense")
    rng = np.random.default_rng(5)
    for step in range(2):                     # second step: fresh inputs through reused buffers
        x = rng.standard_normal((37, 8, 8, 3)).astype(np.float32)   # 37 rows: not a multiple of 32
        y = rng.integers(0, 10, 37)
        lc = cpu.forward(x.astype(np.float64))
        lg = gpu.forward(cupy.asarray(x))
        assert rel_error(lg.get(), lc) < 1e-5, (variant, step)
        loss_c, gc = cpu.loss(lc, y)
        loss_g, gg = gpu.loss(lg, cupy.asarray(y))
        assert float(loss_g) == pytest.approx(float(loss_c), rel=1e-5)
        cpu.backward(gc)
        gpu.backward(gg)
        for (name, _), a, b in zip(cpu.params(), cpu.grads, gpu.grads):
            assert rel_error(b.get(), a) < 1e-4, (variant, step, name)
        cpu.step(0.05, 0.9, 5e-4, 5.0)
        gpu.step(0.05, 0.9, 5e-4, 5.0)
        for (name, a), (_, b) in zip(cpu.params(), gpu.params()):
            assert rel_error(b.get(), a) < 1e-5, (variant, step, name)


def test_cli_digits_gpu(cli):
    pytest.importorskip("sklearn", reason="dataset=digits needs scikit-learn")
    r = cli("model=bcm_cnn", "dataset=digits", "backend=cuda", "block_size=16", "epochs=4",
            "model.min_accuracy=0.6", "size=full")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "bcm_k16" in out and "tiled" in out and "cublas_fp32" in out


def test_cli_cifar10_gpu_subset(cli, compose):
    from pipeline.data.paths import find
    from pipeline.errors import DataError
    try:
        find(compose(["model=bcm_cnn"]), "cifar10-jpeg")
    except DataError as e:
        pytest.skip(f"CIFAR-10 not available: {e}")
    r = cli("model=bcm_cnn", "dataset=cifar10", "backend=cuda", "block_size=32", "epochs=1",
            "model.train_limit=4096", "model.test_limit=1000", "model.min_accuracy=0.15", "kernel=dft")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "conv576-64[BCM]" in out and "fc8192-1024[BCM]" in out
