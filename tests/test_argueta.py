"""CPU tests for the Argueta & Chiang models: references, order-preserving key packing, config, CLI."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.models.argueta import reference as ref


# ------------------------------------------------------------------------------ key packing

def test_ordered_keys_preserve_float_order_including_negatives():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(2000).astype(np.float32) * 1e3,
                        np.array([0.0, np.inf, -np.inf, 1e-45, -1e-45, np.finfo(np.float32).max,
                                  -np.finfo(np.float32).max], np.float32)])
    k = ref.ordered_u32(x)
    finite_or_inf = ~np.isnan(x)
    order_x = np.argsort(x[finite_or_inf], kind="stable")
    ks = k[finite_or_inf][order_x]
    assert np.all(np.diff(ks.astype(np.int64)) >= 0)            # non-decreasing along sorted floats
    # strictly increasing wherever the floats differ (no two distinct floats share a key)
    xs = x[finite_or_inf][order_x]
    assert np.all((np.diff(xs) > 0) <= (np.diff(ks.astype(np.int64)) > 0))
    assert ref.ordered_u32(np.float32(-0.0)) < ref.ordered_u32(np.float32(0.0))
    assert ref.ordered_u32(np.float32(-1.0)) < ref.ordered_u32(np.float32(-0.5))   # raw bits would invert this


def test_nan_ranks_above_inf_and_every_nan_is_equal():
    nans = np.array([np.nan, -np.nan], np.float32)
    nans = np.concatenate([nans, np.array([0x7FC00001, 0xFFFFFFFF], np.uint32).view(np.float32)])
    k = ref.ordered_u32(nans)
    assert np.all(k == 0xFFFFFFFF)
    assert ref.ordered_u32(np.float32(np.inf)) < k[0]
    assert ref.ordered_u32(np.float32(-np.inf)) > 0                      # 0 stays the empty slot


def test_key_roundtrip_and_tie_rule():
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(100).astype(np.float32), [np.inf, -np.inf, -0.0]]).astype(np.float32)
    np.testing.assert_array_equal(ref.key_float(ref.ordered_u32(x)).view(np.uint32), x.view(np.uint32))
    packed = ref.pack_keys(np.array([2.0, 2.0, -3.0], np.float32), np.array([7, 3, 0]))
    assert packed[1] > packed[0] > packed[2]                              # equal values: smaller index first
    xs, idx = ref.unpack_keys(packed)
    np.testing.assert_array_equal(idx, [7, 3, 0])
    np.testing.assert_array_equal(xs, [2.0, 2.0, -3.0])


# ------------------------------------------------------------------------------ top-N references

def _brute_topn(x, n):
    """Independent reference: Python sort by (value, -index) with NaN on top."""
    out_i, out_p = [], []
    for row in x.astype(np.float64):
        with np.errstate(invalid="ignore", over="ignore"):
            m = np.max(row)
            p = np.exp(row - m) / np.sum(np.exp(row - m))
        key = lambda j: (1, 0.0, -j) if np.isnan(row[j]) else (0, row[j], -j)   # noqa: E731
        order = sorted(range(len(row)), key=key, reverse=True)[:n]
        out_i.append(order)
        out_p.append(p[order])
    return np.array(out_p), np.array(out_i)


@pytest.mark.parametrize("L,K,n", [(3, 257, 1), (4, 1000, 10), (2, 33, 33), (5, 300, 64)])
def test_topn_reference_matches_brute_force(L, K, n):
    rng = np.random.default_rng(K + n)
    x = ref.make_logits(L, K, rng)
    assert np.any(x < 0) and np.any(np.isneginf(x))
    assert any(len(np.unique(r[np.isfinite(r)])) < np.isfinite(r).sum() for r in x)   # ties present
    e = ref.topn_reference(x, n)
    p, i = _brute_topn(x, n)
    np.testing.assert_array_equal(e["idx"], i)
    np.testing.assert_allclose(e["probs"], p, rtol=0, atol=1e-12)
    assert np.all(np.diff(e["probs"], axis=1) <= 0)


def test_topn_cpu_variants_pass_their_checks():
    rng = np.random.default_rng(5)
    x = ref.make_logits(6, 999, rng)
    for n in (1, 5, 100):
        e = ref.topn_reference(x, n)
        errs = ref.check_topn(ref.topn_cpu(x, n), e, exact=True)
        assert errs["index"] == 0 and errs["prob"] <= 1e-5, errs
        errs = ref.check_topn(ref.topn_sort(x, n), e, exact=False)
        assert errs["index"] == 0 and errs["prob"] <= 1e-5, errs


def test_check_topn_catches_wrong_answers():
    rng = np.random.default_rng(6)
    x = ref.make_logits(2, 100, rng, ties=False, neg_inf=False)
    e = ref.topn_reference(x, 5)
    good = {"probs": e["probs"].astype(np.float32), "idx": e["idx"].astype(np.int32)}
    assert ref.check_topn(good, e)["index"] == 0
    bad = {"probs": good["probs"], "idx": good["idx"].copy()}
    bad["idx"][0, 4] = e["idx"][0, 0]                       # duplicate index
    assert ref.check_topn(bad, e, exact=False)["index"] > 0
    assert ref.check_topn(bad, e, exact=True)["index"] > 0
    worse = {"probs": good["probs"] * 1.01, "idx": good["idx"]}
    assert ref.check_topn(worse, e)["prob"] > 1e-5


def test_nan_and_all_neg_inf_rows_have_defined_results():
    x = np.array([[1.0, np.nan, 3.0, np.nan, -2.0],
                  [-np.inf] * 5,
                  [0.5, np.inf, -1.0, 2.0, np.inf]], np.float32)
    e = ref.topn_reference(x, 3)
    np.testing.assert_array_equal(e["idx"][0], [1, 3, 2])      # NaNs first (smaller index first), then 3.0
    np.testing.assert_array_equal(e["idx"][1], [0, 1, 2])      # all equal: index order
    np.testing.assert_array_equal(e["idx"][2], [1, 4, 3])      # +inf twice, then 2.0
    assert np.all(np.isnan(e["probs"]))                        # NaN, only -inf, +inf rows: NaN probabilities
    c = ref.topn_cpu(x, 3)
    assert ref.check_topn(c, e)["index"] == 0
    assert ref.check_topn(c, e)["prob"] == 0.0                 # NaN where the reference is NaN counts as equal


# ------------------------------------------------------------------------------ lookup reference

def test_fewhot_inputs_and_gather_reference():
    rng = np.random.default_rng(7)
    A, B = ref.make_fewhot(9, 301, 37, 4, rng)
    assert np.all(np.diff(A.indptr) == 4) and A.has_sorted_indices
    assert np.any(A.data < 0) and not np.any(np.abs(A.data) == 1.0)
    assert all(len(set(A.indices[A.indptr[i]:A.indptr[i + 1]])) == 4 for i in range(9))
    C64 = ref.fewhot_reference(A, B)
    C = ref.fewhot_gather(A, B)
    assert C.dtype == np.float32
    assert np.linalg.norm(C - C64) / np.linalg.norm(C64) < 1e-6


def test_fewhot_gather_variable_nnz_and_empty_rows():
    rng = np.random.default_rng(8)
    A = sp.random(12, 50, density=0.1, random_state=3, format="csr", dtype=np.float32)
    A = sp.vstack([A, sp.csr_matrix((2, 50), dtype=np.float32)]).tocsr()
    B = rng.standard_normal((50, 8), dtype=np.float32)
    np.testing.assert_allclose(ref.fewhot_gather(A, B), ref.fewhot_reference(A, B), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ config + CLI

def test_configs_compose_and_validate(compose):
    from pipeline.config import validate
    c = compose(["model=fewhot"])
    validate(c)
    assert c.model.name == "fewhot" and c.kernel.name == "fewhot" and c.model.tolerance == 1e-5
    c = compose(["model=softmax_topn"])
    validate(c)
    assert c.kernel.name == "topn_bucket" and c.model.block_size == 256 and c.model.vec == 0
    c = compose(["experiment=argueta_table1"])
    validate(c)
    assert list(c.model.n_hot) == [1, 2, 3, 4, 5, 10, 50, 100] and c.model.width == 512
    assert len(c.model.paper["V100"]["cusparse"]) == 8
    c = compose(["experiment=argueta_table2"])
    validate(c)
    assert list(c.model.rows) == [1, 512, 1024] and len(c.model.top_n) == 9
    assert c.model.paper["V100"]["online_topk_fixed"]["1"][0] == 3.56


def test_default_commands_time_paper_and_best(compose):
    """model=softmax_topn / model=fewhot with no kernel= time the paper's variant and the project's
    fastest side by side; kernel=<name> or model.variants=[...] times what was asked."""
    from pipeline.config import validate
    from pipeline.models.argueta.variants import FEWHOT, TOPN
    for overrides, reg, want in [
        (["model=softmax_topn"], TOPN, ["topn_atomic", "topn_bucket"]),
        (["model=softmax_topn", "kernel=topn_early_exit"], TOPN, ["topn_early_exit"]),
        (["model=softmax_topn", "model.variants=[topn_radix]"], TOPN, ["topn_radix"]),
        (["experiment=argueta_table2"], TOPN, ["topn_atomic", "topn_early_exit", "topn_split", "topn_radix",
                                               "topn_bucket"]),
        (["model=fewhot"], FEWHOT, ["fewhot", "fewhot_vec"]),
        (["model=fewhot", "kernel=fewhot_vec"], FEWHOT, ["fewhot_vec"]),
    ]:
        c = compose(overrides)
        validate(c)
        assert reg.check(c) == want, overrides
    c = compose(["model=softmax_topn"])
    assert list(c.model.baselines) == ["softmax_topk", "torch_topk", "online_topk"]


def test_bucket_shape_holds_the_row():
    from pipeline.models.argueta.gpu import BUCKET_MAX_K, bucket_shape
    for L, K, N in [(1, 10240, 10), (1024, 10240, 100), (1024, 10240, 400), (7, 1000, 1), (200, 32768, 1024),
                    (1, 5, 5), (500, 10237, 50)]:
        V, T = bucket_shape(L, K, N, 132)
        assert T % 32 == 0 and T <= 1024 and 4 * V * T >= K, (L, K, N)
    assert bucket_shape(1024, 10240, 100, 132) == (8, 320)        # many rows: fewest threads a row
    assert bucket_shape(1, 10240, 100, 132) == (4, 640)           # one row: most threads on it
    assert bucket_shape(1024, 10240, 400, 132) == (4, 640)        # N > threads / 2: more threads
    assert bucket_shape(1, BUCKET_MAX_K + 1, 10, 132) is None
    assert bucket_shape(1, 10240, 1025, 132) is None
    with pytest.raises(ValueError):
        bucket_shape(1, 10240, 10, 132, vec=1)                   # 2560 threads: more than a block


@pytest.mark.parametrize("overrides,culprit", [
    (["model=softmax_topn", "model.top_n=[2000]", "model.vocab=1000"], "model.top_n"),
    (["model=softmax_topn", "model.block_size=100"], "model.block_size"),
    (["model=softmax_topn", "kernel=fused"], "kernel"),
    (["model=softmax_topn", "model.vec=3"], "model.vec"),
    (["model=softmax_topn", "kernel.variants=[topn_atomic,fused]"], "kernel.variants"),
    (["model=fewhot", "model.n_hot=[0]"], "model.n_hot"),
    (["model=fewhot", "model.baselines=[torch_topk]"], "model.baselines"),
])
def test_validation_errors_name_the_key(compose, overrides, culprit):
    from pipeline.config import validate
    from pipeline.errors import ConfigError
    with pytest.raises(ConfigError) as e:
        validate(compose(overrides))
    assert str(e.value).startswith(culprit) and "\n" not in str(e.value)


@pytest.mark.slow
def test_cli_fewhot_cpu(cli):
    r = cli("model=fewhot", "backend=cpu", check=True)
    assert "need a GPU" in r.stderr and "cpu_sparse" in r.stdout and "FAIL" not in r.stdout


@pytest.mark.slow
def test_cli_table2_cpu_small_preset(cli):
    r = cli("experiment=argueta_table2", "backend=cpu", "model.top_n=[10,400]", "tracking=off", check=True)
    assert "small preset" in r.stderr
    assert "L=1 N=10" in r.stdout and "L=4 N=400" in r.stdout and "FAIL" not in r.stdout


def test_cli_bad_override_is_one_line(cli):
    r = cli("model=softmax_topn", "backend=cpu", "model.top_n=[0]", "tracking=off")
    assert r.returncode == 2
    assert "model.top_n" in r.stderr and "Traceback" not in r.stderr
