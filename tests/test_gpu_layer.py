"""The shared GPU layer on a real GPU: cuBLAS wrappers, CUDA-graph capture of PyCUDA + CuPy work,
pipelined transfers, event timing and the measured peaks."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def dev():
    from pipeline.gpu import device
    return device.init(0)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("precision,tol", [("fp32", 1e-5), ("tf32", 5e-3)])
def test_sgemm_matches_numpy(dev, ta, tb, precision, tol):
    import cupy
    from pipeline.gpu import blas
    r = np.random.default_rng()
    m, n, k = 37, 53, 71
    a = r.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = r.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    out = cupy.full((m, n), np.nan, cupy.float32)
    blas.sgemm(cupy.asarray(a), cupy.asarray(b), out, ta, tb, precision)
    ref = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b)
    assert np.linalg.norm(cupy.asnumpy(out) - ref) / np.linalg.norm(ref) < tol


def test_cgemm_batched_matches_numpy(dev):
    import cupy
    from pipeline.gpu import blas
    r = np.random.default_rng()
    a = (r.standard_normal((5, 9, 7)) + 1j * r.standard_normal((5, 9, 7))).astype(np.complex64)
    b = (r.standard_normal((5, 11, 7)) + 1j * r.standard_normal((5, 11, 7))).astype(np.complex64)
    out = cupy.full((5, 9, 11), np.nan, cupy.complex64)
    blas.cgemm_batched(cupy.asarray(a), cupy.asarray(b), out, trans_b=True)
    ref = np.einsum("bik,bjk->bij", a.astype(np.complex128), b)
    assert np.linalg.norm(cupy.asnumpy(out) - ref) / np.linalg.norm(ref) < 1e-5


def test_graph_replays_kernels_cupy_and_cublas(dev):
    import cupy
    from pipeline.gpu import blas
    from pipeline.gpu.graphs import Graph
    from pipeline.models.bcm import gpu
    r = np.random.default_rng()
    x = cupy.asarray(r.standard_normal((64, 32)).astype(np.float32))
    w = cupy.asarray(r.standard_normal((16, 32)).astype(np.float32))
    bias = cupy.asarray(r.standard_normal(16).astype(np.float32))

    def fn():
        y = blas.sgemm(x, w, cupy.empty((64, 16), cupy.float32), trans_b=True)
        gpu.add_bias(y, bias)            # a PyCUDA kernel on the captured stream
        return {"y": cupy.tanh(y)}       # a CuPy element-wise kernel
    g = Graph(fn)
    out = g.outputs["y"]
    out.fill(np.nan)
    for _ in range(2):
        x[...] = cupy.asarray(r.standard_normal((64, 32)).astype(np.float32))   # new inputs, same buffers
        g.launch()
        cupy.cuda.Device().synchronize()
        ref = np.tanh(cupy.asnumpy(x).astype(np.float64) @ cupy.asnumpy(w).T + cupy.asnumpy(bias))
        assert np.allclose(cupy.asnumpy(out), ref, atol=1e-5)


def test_graph_keeps_the_captured_inputs_alive(dev):
    """A replay reads the buffers the captured function refers to: they stay allocated for as long
    as the graph, also when the caller drops the function and others allocate (a freed input handed
    to the next allocation would have the replay read someone else's data)."""
    import gc
    import cupy
    from pipeline.gpu.graphs import Graph

    def make():
        idx = cupy.arange(1 << 16, dtype=cupy.int32)[::-1].copy()     # a gather's indices
        src = cupy.arange(1 << 16, dtype=cupy.float32)
        return lambda: {"y": src[idx]}
    g = Graph(make())
    gc.collect()
    junk = [cupy.full(1 << 16, -7, cupy.int32) for _ in range(8)]       # would reuse freed blocks
    for _ in range(2):
        g.outputs["y"].fill(np.nan)
        g.launch()
        cupy.cuda.Device().synchronize()
        assert np.array_equal(cupy.asnumpy(g.outputs["y"]), np.arange(1 << 16, dtype=np.float32)[::-1])
    del junk


def test_chunk_feeder_overlaps_and_delivers_every_chunk(dev):
    from pipeline.gpu.transfer import ChunkFeeder, pinned_like
    r = np.random.default_rng()
    chunks = [(pinned_like(r.standard_normal(1000 + 10 * i).astype(np.float32)),) for i in range(7)]
    sums = []
    feeder = ChunkFeeder(chunks, depth=3)
    for i, (buf,) in feeder:
        from pipeline.gpu.transfer import cupy_stream
        with cupy_stream(feeder.compute_stream):
            sums.append(buf.sum())
    got = [float(s.get()) for s in sums]
    assert np.allclose(got, [c[0].sum() for c in chunks], rtol=1e-4)


def test_event_timing_and_peaks(dev, tmp_path):
    import cupy
    from pipeline.gpu import peaks
    from pipeline.gpu.timer import time_cuda

    class B:
        warmup, min_repeats, max_repeats, min_time_ms = 1, 5, 20, 5.0
    a = cupy.ones(1 << 24, cupy.float32)
    t = time_cuda(lambda: a * 2, B)
    assert t.n >= 5 and 0 < t.median_ms < 100
    p = peaks.get(str(tmp_path))
    assert 500 < p.copy_gbps < 20000 and 5 < p.fp32_tflops < p.tf32_tflops


def test_hold_kernel_and_parallel_branches(dev):
    """The timer's hold kernel runs and is switched off by bench.hold=false; graphs.parallel gives
    each branch its own stream (and cuBLAS handle) and joins them, eagerly and in a graph."""
    import cupy
    from pipeline.gpu import blas, graphs
    from pipeline.gpu.timer import time_cuda

    class B:
        warmup, min_repeats, max_repeats, min_time_ms = 1, 3, 5, 0.0
    a = cupy.ones(1 << 20, cupy.float32)
    for hold in (True, False):
        B.hold = hold
        t = time_cuda(lambda: a * 2, B)
        assert t.n >= 3 and t.median_ms > 0
    r = np.random.default_rng()
    x = (r.standard_normal((4, 8, 6)) + 1j * r.standard_normal((4, 8, 6))).astype(np.complex64)
    y = (r.standard_normal((4, 6, 5)) + 1j * r.standard_normal((4, 6, 5))).astype(np.complex64)
    xd, yd = cupy.asarray(x), cupy.asarray(y)
    ref1 = np.einsum("bik,bkj->bij", x.astype(np.complex128), y)

    def fn():
        o1, o2 = graphs.parallel(
            lambda: blas.cgemm_batched(xd, yd, cupy.empty((4, 8, 5), cupy.complex64)),
            lambda: blas.cgemm_batched(xd, yd, cupy.empty((4, 8, 5), cupy.complex64), gauss=True))
        return {"o1": o1, "o2": o2}
    out = fn()
    cupy.cuda.Device().synchronize()
    for o in out.values():
        assert np.linalg.norm(cupy.asnumpy(o) - ref1) / np.linalg.norm(ref1) < 1e-5
    g = graphs.Graph(fn)
    for o in g.outputs.values():
        o.fill(np.nan)
    g.launch()
    g.stream.synchronize()
    for o in g.outputs.values():
        assert np.linalg.norm(cupy.asnumpy(o) - ref1) / np.linalg.norm(ref1) < 1e-5
    assert len(blas._handles) >= 2      # one handle per side stream
