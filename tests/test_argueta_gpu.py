"""GPU tests for the Argueta & Chiang kernels: every variant against the float64 references on fresh
random inputs (negative values, ties, -inf, K not a multiple of the block size), NaN rows, and the
CLI on the GPU backend."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.models.argueta import reference as ref

pytestmark = pytest.mark.gpu

TOPN_METHODS = ["atomic", "early_exit", "split", "radix", "bucket", "online", "online_fixed", "auto"]


@pytest.fixture(scope="module")
def dev():
    from pipeline.gpu import device
    return device.init(0)


def _csr(A):
    import cupy as cp
    import cupyx.scipy.sparse as csp
    return csp.csr_matrix((cp.asarray(A.data), cp.asarray(A.indices), cp.asarray(A.indptr)), shape=A.shape)


@pytest.mark.parametrize("variant", ["paper", "vec"])
@pytest.mark.parametrize("L,K,M,N", [(100, 10240, 512, 1), (100, 10240, 512, 5), (33, 1000, 37, 3),
                                     (7, 129, 130, 100), (1, 50, 4, 50)])
def test_fewhot_lookup_matches_float64(dev, variant, L, K, M, N):
    import cupy as cp
    from pipeline.models.argueta import fewhot_lookup
    rng = np.random.default_rng(L * 7 + K + M + N)
    A, B = ref.make_fewhot(L, K, M, N, rng)
    out = cp.full((L, M), cp.nan, cp.float32)                      # poisoned
    C = fewhot_lookup(_csr(A), cp.asarray(B), out=out, variant=variant)
    got = cp.asnumpy(C)
    exp = ref.fewhot_reference(A, B)
    assert np.all(np.isfinite(got))
    assert np.linalg.norm(got - exp) / np.linalg.norm(exp) <= 1e-5


@pytest.mark.parametrize("variant", ["paper", "vec"])
def test_fewhot_lookup_variable_nnz_and_empty_rows(dev, variant):
    import cupy as cp
    import scipy.sparse as sp
    from pipeline.models.argueta import fewhot_lookup
    rng = np.random.default_rng(11)
    A = sp.random(40, 300, density=0.05, random_state=4, format="csr", dtype=np.float32)
    A = sp.vstack([A, sp.csr_matrix((3, 300), dtype=np.float32)]).tocsr()
    B = rng.standard_normal((300, 64), dtype=np.float32)
    got = cp.asnumpy(fewhot_lookup(_csr(A), cp.asarray(B), variant=variant))
    np.testing.assert_allclose(got, ref.fewhot_reference(A, B), rtol=1e-5, atol=1e-5)


def _run_topn(x, n, method, split=0, vec=0):
    import cupy as cp
    from pipeline.models.argueta import softmax_topn
    L = x.shape[0]
    P = cp.full((L, n), cp.nan, cp.float32)
    I = cp.full((L, n), -1, cp.int32)
    softmax_topn(cp.asarray(x), n, method=method, out=(P, I), split=split, vec=vec)
    cp.cuda.Device().synchronize()
    return {"probs": P, "idx": I}


@pytest.mark.parametrize("method", TOPN_METHODS)
@pytest.mark.parametrize("L,K,n", [(1, 10240, 10), (5, 10007, 1), (3, 1000, 64), (130, 777, 7),
                                   (2, 4099, 400), (4, 300, 300), (1, 65536, 50)])
def test_softmax_topn_exact(dev, method, L, K, n):
    rng = np.random.default_rng(L + K + n)
    x = ref.make_logits(L, K, rng)
    e = ref.topn_reference(x, n)
    errs = ref.check_topn(_run_topn(x, n, method), e, exact=True)
    assert errs["index"] == 0 and errs["prob"] <= 1e-5, errs


@pytest.mark.parametrize("vec", [0, 1, 2, 4, 8])
@pytest.mark.parametrize("L,K", [(1, 10240), (3, 10237), (140, 5000), (2, 4099), (4, 333), (2, 32768)])
def test_softmax_topn_bucket_fresh_inputs(dev, vec, L, K):
    """topn_bucket with every register layout that holds the row, on fresh random logits (ties,
    -inf, K not a multiple of 4 or of the block), N at the edges (1, 100, 400, up to 1024), and rows
    that take the exact fallback: constant rows, integer-valued rows (ties across the threshold),
    rows with fewer threads than N."""
    from pipeline.gpu import device
    from pipeline.models.argueta.gpu import bucket_shape
    seed = int(np.random.SeedSequence().entropy % (1 << 32))
    rng = np.random.default_rng(seed)
    sms = device.info().sm_count
    for n in sorted({1, 7, 100, 400, 1024, K} & set(range(1, min(K, 1024) + 1))):
        try:
            shape = bucket_shape(L, K, n, sms, vec)
        except ValueError:
            continue                                            # this layout cannot hold K
        assert shape is not None
        x = ref.make_logits(L, K, rng)
        if L >= 3:
            x[1, :] = -0.75                                    # constant row: the exact fallback
            x[2, :] = np.round(x[2, :])                        # many ties at the threshold value
        e = ref.topn_reference(x, n)
        errs = ref.check_topn(_run_topn(x, n, "bucket", vec=vec), e, exact=True)
        assert errs["index"] == 0 and errs["prob"] <= 1e-5, (seed, n, shape, errs)


def test_softmax_topn_bucket_fallbacks_to_split_for_long_rows(dev):
    from pipeline.models.argueta.gpu import TopnPlan
    assert TopnPlan(1, 40000, 10, "bucket").method in ("radix", "split")
    assert TopnPlan(1, 10240, 10, "bucket").method == "bucket"
    assert TopnPlan(1024, 10240, 100, "auto").method == "bucket"


def test_fewhot_baselines_match_float64(dev):
    from pipeline.bench import Case
    from pipeline.models.argueta import gpu
    rng = np.random.default_rng(12)
    A, B = ref.make_fewhot(100, 10240, 512, 5, rng)
    case = Case("t", dict(L=100, K=10240, M=512, N=5), dict(A=A, B=B), lambda: {"C": ref.fewhot_reference(A, B)})
    for name, v in gpu.fewhot_variants().items():
        got = v.build(case, None)()["C"].get()
        exp = case.expected()["C"]
        assert np.linalg.norm(got - exp) / np.linalg.norm(exp) <= 1e-5, name


@pytest.mark.parametrize("split", [2, 3, 16])
def test_softmax_topn_split_counts(dev, split):
    rng = np.random.default_rng(split)
    x = ref.make_logits(3, 5000, rng)
    for n in (1, 33, 256):
        errs = ref.check_topn(_run_topn(x, n, "split", split=split), ref.topn_reference(x, n), exact=True)
        assert errs["index"] == 0 and errs["prob"] <= 1e-5, (n, errs)


@pytest.mark.parametrize("method", TOPN_METHODS)
def test_softmax_topn_nan_inf_rows(dev, method):
    rng = np.random.default_rng(3)
    x = ref.make_logits(6, 513, rng)
    x[0, [5, 100, 400]] = np.nan                              # NaN: ranked first, probabilities NaN
    x[1, :] = -np.inf                                        # only -inf: index order, NaN probabilities
    x[2, 7] = np.inf                                         # +inf: NaN probabilities (as float64 NumPy)
    x[3, :] = 2.5                                            # all equal: index order, p = 1/K
    x[4, ::2] = -np.inf                                      # half masked
    e = ref.topn_reference(x, 8)
    out = _run_topn(x, 8, method)
    errs = ref.check_topn(out, e, exact=True)
    assert errs["index"] == 0 and errs["prob"] <= 1e-5, errs
    idx = out["idx"].get()
    np.testing.assert_array_equal(idx[0, :3], [5, 100, 400])
    np.testing.assert_array_equal(idx[1], np.arange(8))
    np.testing.assert_allclose(out["probs"].get()[3], 1.0 / 513, rtol=1e-5)


def test_baselines_up_to_ties(dev):
    from pipeline.bench import Case
    from pipeline.gpu import device
    from pipeline.models.argueta import gpu
    rng = np.random.default_rng(9)
    x = ref.make_logits(4, 3001, rng)
    case = Case("t", dict(L=4, K=3001, N=20), dict(x=x), lambda: ref.topn_reference(x, 20))
    names = ["softmax_topk"] + ([] if device.why_no_torch() else ["torch_topk"])
    table = gpu.topn_variants(None, None)
    for name in names:
        out = table[name].build(case, None)()
        errs = ref.check_topn(out, case.expected(), exact=False)
        assert errs["index"] == 0 and errs["prob"] <= 1e-5, (name, errs)


def test_cli_models_on_gpu(cli):
    r = cli("model=fewhot", "backend=cuda", "model.n_hot=[1,5]", "model.variants=[fewhot,fewhot_vec]",
            "bench.min_time_ms=5", "tracking=off", check=True)
    assert "FAIL" not in r.stdout and "fewhot_vec" in r.stdout
    assert "graph capture failed" not in r.stderr and "direct SpMM refused" not in r.stderr, r.stderr
    r = cli("model=softmax_topn", "backend=cuda", "model.rows=[1,64]", "model.top_n=[10,100]", "model.vocab=5000",
            "model.variants=[topn_atomic,topn_early_exit,topn_split,topn_radix,topn_bucket]", "bench.min_time_ms=5",
            "tracking=off", check=True)
    assert "FAIL" not in r.stdout and "topn_radix" in r.stdout and "topn_bucket" in r.stdout
    assert "graph capture failed" not in r.stderr, r.stderr


def test_cli_default_commands_time_paper_and_best(cli):
    """The headline commands: the paper's variant and the project's fastest side by side, with the baselines."""
    r = cli("model=softmax_topn", "backend=cuda", "model.rows=[64]", "model.vocab=3000", "bench.min_time_ms=5",
            "tracking=off", check=True)
    assert "FAIL" not in r.stdout
    for name in ("topn_atomic", "topn_bucket", "torch_topk"):
        assert name in r.stdout, (name, r.stdout)
    r = cli("model=fewhot", "backend=cuda", "model.rows=20", "model.vocab=500", "model.width=64",
            "bench.min_time_ms=5", "tracking=off", check=True)
    assert "FAIL" not in r.stdout
    for name in ("fewhot", "fewhot_vec", "cusparse"):
        assert name in r.stdout, (name, r.stdout)
