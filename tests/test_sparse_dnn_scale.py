"""CPU tests of what makes model=sparse_dnn feasible at 65536 x 1920: lazy RadiX-Net layers
(regenerated per pass, never held), parallel generation / packing / inputs, the layer-major
parallel reference, the inputs cache without values, the host-memory estimate and model.budget_s
(with a fake GPU runner). Each runs in seconds."""
from __future__ import annotations

import pickle
import types
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from omegaconf import OmegaConf

from pipeline.data import hpec, radixnet
from pipeline.models.sparse_dnn import reference as ref
from pipeline.models.sparse_dnn.gpu import pack_csc, pack_sectioned, packed_bytes

ROOT = Path(__file__).resolve().parents[1]
# the data directory of the config (env PIPELINE_DATA_DIR, else data/ of the project)
MNIST = Path(os.environ.get("PIPELINE_DATA_DIR") or ROOT / "data") / "mnist"


def _old_layer(N, l, seed=0):
    """The generator as it was (sort per row): the new one must give the same matrices."""
    M = N // radixnet.FAN
    p = 1 << ((l - 1) % radixnet.depth(N))
    perm = radixnet.group_permutation(N, (l - 1) // radixnet.depth(N), seed)
    src = np.empty(N, np.int64)
    src[perm] = np.arange(N)
    i = src % M
    base = np.arange(radixnet.FAN, dtype=np.int64) * M
    cols = np.concatenate([base[None, :] + i[:, None], base[None, :] + ((i - p) % M)[:, None]], axis=1)
    cols.sort(axis=1)
    return cols.ravel()


def _old_pack_sectioned(layers, S):
    """The packing as it was (stable argsort by section)."""
    N = layers[0].shape[0]
    sec = N // S
    cap = max(w.nnz for w in layers)
    stride = -(-(S * N + 1 + 2 * cap) // 32) * 32
    out = np.zeros((len(layers), stride), np.int32)
    for l, W in enumerate(layers):
        W = W if W.has_sorted_indices else W.sorted_indices()
        row, nnz, j = out[l], W.nnz, W.indices
        vals = W.data.astype(np.float32).view(np.int32)
        if S == 1:
            row[: N + 1], row[N + 1: N + 1 + nnz], row[N + 1 + cap: N + 1 + cap + nnz] = W.indptr, j, vals
            continue
        t = j // sec
        order = np.argsort(t, kind="stable")
        key = t.astype(np.int64) * N + np.repeat(np.arange(N), np.diff(W.indptr))
        ptr = np.zeros(S * N + 1, np.int64)
        np.cumsum(np.bincount(key, minlength=S * N), out=ptr[1:])
        row[: S * N + 1] = ptr
        row[S * N + 1: S * N + 1 + nnz] = j[order]
        row[S * N + 1 + cap: S * N + 1 + cap + nnz] = vals[order]
    return out, cap


# ---------------------------------------------------------------------------- generator

@pytest.mark.parametrize("N", [1024, 4096, 65536])
def test_fast_layer_equals_the_sorting_generator(N):
    for l in (1, 2, radixnet.depth(N), radixnet.depth(N) + 3, 40):
        W = radixnet.layer(N, l, seed=4)
        assert W.has_sorted_indices and W.dtype == np.float32 and W.nnz == 32 * N
        assert np.array_equal(W.indices, _old_layer(N, l, 4)), l
        assert np.array_equal(W.indptr, np.arange(N + 1) * 32) and np.all(W.data == np.float32(1 / 16))
        assert np.array_equal(W.sorted_indices().indices, W.indices)


def test_lazy_layers_behave_like_a_list():
    lz = radixnet.Layers(1024, 14, seed=2)
    full = radixnet.network_layers(1024, 14, 2, workers=3)
    assert len(lz) == 14 and lz.edges == sum(w.nnz for w in full) and lz.max_nnz == 32 * 1024
    assert lz.nbytes == 14 * radixnet.layer_nbytes(1024)
    for a, b in zip(lz, full):
        assert (a != b).nnz == 0
    assert (lz[-1] != full[-1]).nnz == 0 and len(lz[2:5]) == 3 and (lz[2:5][0] != full[2]).nnz == 0
    with pytest.raises(IndexError):
        lz[14]
    assert lz[3] is not lz[3]                               # regenerated, not held
    kept = radixnet.Layers(1024, 14, seed=2, keep=True)
    assert kept[3] is kept[3]
    again = pickle.loads(pickle.dumps(lz))                  # workers get the recipe, not the matrices
    assert len(pickle.dumps(lz)) < 1000 and (again[7] != full[7]).nnz == 0


def test_parallel_map_keeps_order_and_bounds_the_window():
    import threading
    running, peak, lock = [0], [0], threading.Lock()

    def fn(k):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        with lock:
            running[0] -= 1
        return k * k
    seen = []
    for k, v in enumerate(radixnet.parallel_map(fn, 50, workers=3, window=4)):
        seen.append(v)
        assert v == k * k
    assert seen == [k * k for k in range(50)] and peak[0] <= 3
    assert list(radixnet.parallel_map(fn, 5, workers=1)) == [0, 1, 4, 9, 16]
    g = radixnet.parallel_map(fn, 100, workers=2)           # abandoned early: the pool shuts down
    next(g)
    g.close()


def test_make_network_goes_lazy_above_keep_bytes():
    Y0 = sp.csr_matrix(np.ones((3, 1024), np.float32))
    small = radixnet.make_network(1024, 6, Y0, seed=1)
    assert isinstance(small.layers, list) and not small.meta["lazy_layers"]
    big = radixnet.make_network(1024, 6, Y0, seed=1, keep_bytes=0)
    assert isinstance(big.layers, radixnet.Layers) and big.meta["lazy_layers"]
    assert big.edges() == small.edges() == 6 * 32 * 1024 and big.L == 6
    huge = radixnet.make_network(65536, 1920, sp.csr_matrix((2, 65536), dtype=np.float32))
    assert huge.meta["lazy_layers"] and huge.edges() == 32 * 65536 * 1920     # no generation needed


# ---------------------------------------------------------------------------- packing

def _irregular(N, L, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(L):
        W = sp.random(N, N, density=rng.uniform(0.01, 0.05), random_state=rng, format="csr", dtype=np.float32)
        W.data -= 0.5
        out.append(W)
    return out


@pytest.mark.parametrize("S", [1, 2, 4, 8])
def test_sectioned_packing_equals_the_sorting_version(S):
    layers = _irregular(256, 5, S)
    want, wcap = _old_pack_sectioned(layers, S)
    for workers in (1, 3):
        got, cap = pack_sectioned(layers, S, alloc=np.zeros, workers=workers)
        assert cap == wcap and np.array_equal(got, want)
    lz = radixnet.Layers(1024, 9, seed=5)
    got, cap = pack_sectioned(lz, S, alloc=np.zeros, workers=2)
    assert np.array_equal(got, _old_pack_sectioned(list(lz), S)[0])
    assert got.nbytes == packed_bytes(1024, 9, cap, S)


def test_csc_packing_from_lazy_layers():
    lz = radixnet.Layers(1024, 7, seed=1)
    a, cap = pack_csc(lz, alloc=np.zeros, workers=3)
    b, cap2 = pack_csc(list(lz), alloc=np.zeros, workers=1)
    assert cap == cap2 and np.array_equal(a, b) and a.nbytes == packed_bytes(1024, 7, cap)
    C = sp.csr_matrix((a[3, 1025 + cap: 1025 + cap + 32 * 1024].view(np.float32), a[3, 1025: 1025 + 32 * 1024],
                       a[3, :1025]), shape=(1024, 1024))
    assert (C.T != lz[3]).nnz == 0


# ---------------------------------------------------------------------------- reference

@pytest.mark.slow
def test_layer_major_reference_equals_serial_on_official_and_lazy():
    net = hpec.load_npz(ROOT / "data" / "hpec-1024", L=40)
    c1, r1 = ref.infer(net.Y0, net.layers, net.bias, net.ymax)
    c2, r2 = ref.infer_parallel(net.Y0, net.layers, net.bias, net.ymax, workers=2)
    assert np.array_equal(c1, c2) and np.array_equal(r1, r2)
    Y0 = _blobs(1024, 1100)
    lz = radixnet.Layers(1024, 30, seed=2)
    for shortcut in (True, False):
        c1, r1 = ref.infer(Y0, list(lz), radixnet.BIAS[1024], 32.0, shortcut)
        c2, r2 = ref.infer_parallel(Y0, lz, radixnet.BIAS[1024], 32.0, shortcut, workers=2)
        assert np.array_equal(c1, c2) and np.array_equal(r1, r2) and c1.size > 0


def _blobs(N, n):
    a = radixnet.random_inputs(N, n, seed=2)
    return sp.csr_matrix((a["data"], a["indices"], a["indptr"]), shape=tuple(a["shape"]))


def test_reference_stops_when_every_row_is_dead():
    Y0 = _blobs(1024, 600)
    lz = radixnet.Layers(1024, 200, seed=0)
    c1, r1 = ref.infer(Y0, lz[:12], -40.0, 32.0)
    c2, r2 = ref.infer_parallel(Y0, lz, -40.0, 32.0, workers=2)     # 200 layers, dead after the first
    assert c1.size == c2.size == 0 and r2.size == 200 and not r2.any() and not r1.any()


# ---------------------------------------------------------------------------- load_network, memory, budget

def test_load_network_lazy_caches_inputs_without_values(compose, tmp_path):
    from pipeline.models.sparse_dnn.model import host_memory, load_network
    said = []
    cfg = compose(["model=sparse_dnn", "dataset=radixnet_4096", "dataset.inputs=random", f"cache_dir={tmp_path}",
                   "dataset.keep_layers_gb=0"])
    net = load_network(cfg, 1024, 12, 300, True, notice=said.append)
    assert isinstance(net.layers, radixnet.Layers) and any("regenerated on demand" in s for s in said)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert any(f.startswith("radixnet-inputs-") for f in files) and any(f.startswith("sparse-dnn-golden") for f in files)
    with np.load(next(tmp_path.glob("radixnet-inputs-*.npz"))) as z:
        assert "data" not in z.files
    cfg2 = compose(["model=sparse_dnn", "dataset=radixnet_4096", "dataset.inputs=random", f"cache_dir={tmp_path}"])
    held = load_network(cfg2, 1024, 12, 300, True, notice=said.append)
    assert isinstance(held.layers, list) and np.all(held.Y0.data == 1) and (held.Y0 != net.Y0).nnz == 0
    want, _ = ref.infer(held.Y0, held.layers, held.bias, held.ymax)
    assert np.array_equal(net.golden, want) and np.array_equal(held.golden, want)
    est = host_memory(net, ["snig", "bf"], 2)
    assert est["layers"] == 0 and est["snig"] == packed_bytes(1024, 12, 32 * 1024, 2)
    assert host_memory(held, ["snig"])["layers"] > 12 * 32 * 1024 * 8 - 1


def test_host_memory_estimate_of_the_largest_network():
    from pipeline.models.sparse_dnn.model import host_memory
    Y0 = sp.csr_matrix((60000, 65536), dtype=np.float32)
    net = radixnet.make_network(65536, 1920, Y0)
    est = host_memory(net, ["snig", "bf", "cusparse"], 2)
    assert est["layers"] == 0 and 33e9 < est["snig"] < 33.5e9 and 32.5e9 < est["bf"] < 33e9
    assert est["peak"] < 40e9                                   # one runner's pinned copy at a time


class _FakeRunner:
    """Stands in for a GPU runner: answers the golden set; counts passes; every pass leaves the same
    digest of its final activations (``drift``: another one each pass)."""
    passes = []
    drift = False
    track = False

    def __init__(self, net, m, device, notice):
        self.net = net

    @property
    def digest(self):
        return len(_FakeRunner.passes) if _FakeRunner.drift else 7

    answer = None                      # categories to give instead of the golden set

    def _cats(self):
        return self.net.golden if _FakeRunner.answer is None else _FakeRunner.answer

    def profile(self):
        _FakeRunner.passes.append("profile")
        return types.SimpleNamespace(categories=self._cats(), rows=np.zeros(self.net.L), transfer_ms=1.0,
                                     compute_ms=1.0, info={"batch": self.net.images})

    def run(self, lo=0, hi=None):
        _FakeRunner.passes.append("run")
        return self._cats()


def _fake_model(compose, tmp_path, monkeypatch, budget, extra=()):
    from pipeline.models.sparse_dnn import gpu
    from pipeline.models.sparse_dnn.model import SparseDnnModel
    for v in ("snig", "bf", "cusparse"):
        monkeypatch.setitem(gpu.RUNNERS, v, _FakeRunner)
    # kernel=snig: the paper's variant alone (the default adds the project's fastest beside it)
    cfg = compose(["model=sparse_dnn", "kernel=snig", f"cache_dir={tmp_path}", "dataset.layers=4", "dataset.images=50",
                   f"model.budget_s={budget}", *extra])
    notices = []
    ctx = types.SimpleNamespace(cuda=True, backend="cuda", size="full", device=None, notice=notices.append, progress=None,
                                sync=lambda: None)
    model = SparseDnnModel(cfg, ctx)
    model.prepare()
    _FakeRunner.passes = []
    return model, notices


def test_budget_unlimited_runs_everything(compose, tmp_path, monkeypatch):
    model, notices = _fake_model(compose, tmp_path, monkeypatch, 0)
    model.execute()
    assert [r["variant"] for r in model.rows] == ["snig", "bf", "cusparse"] and all(r["ok"] for r in model.rows)
    assert _FakeRunner.passes.count("profile") == 3 and _FakeRunner.passes.count("run") == 3 * (1 + 1 + 3)
    assert "passes" not in model.report().columns


def test_passes_that_differ_bit_for_bit_fail_our_variants_only(compose, tmp_path, monkeypatch):
    model, _ = _fake_model(compose, tmp_path, monkeypatch, 0)
    monkeypatch.setattr(_FakeRunner, "drift", True)
    model.execute()
    by = {r["variant"]: r for r in model.rows}
    assert [r["deterministic"] for r in model.rows] == ["NO: the final activations differ between passes"] * 2 + [
        "not promised; NO: the final activations differ between passes"]
    assert [f.split(":")[0].split("/")[1] for f in model.failures] == ["snig"]       # baselines: noted only
    assert by["snig"]["ok"] and by["snig"]["exact_outside_ambiguous"] == "yes"
    rep = model.report()
    assert any(n.startswith("cusparse: deterministic not promised") for n in rep.notes)


def test_check_allows_only_rounding_ambiguous_rows_to_differ(compose, tmp_path, monkeypatch):
    model, _ = _fake_model(compose, tmp_path, monkeypatch, 0, ["model.baselines=[]"])
    net = model.nets[0]
    assert net.meta["golden_from"].startswith("exact CPU reference") and net.meta["ambiguous"] is not None
    gold = [int(c) for c in net.golden]
    free = [r for r in range(net.images) if r not in gold]
    net.meta["ambiguous"] = np.array(free[:2], np.int64)            # pretend two rows are ambiguous
    monkeypatch.setattr(_FakeRunner, "answer", np.array(sorted(gold + free[:1]), np.int64))
    model.execute()
    r = model.rows[0]
    assert r["ok"] and r["exact_outside_ambiguous"] == "yes" and r["ambiguous"] == 2 and not model.failures
    assert r["ambiguous_rows_differing"] == 1
    rep = model.report()
    assert any(f"classified otherwise than the exact semantics (allowed): [{free[0]}]" in n for n in rep.notes)
    tag = f"{net.N}x{net.L}"
    assert rep.metrics[f"summary/{tag}/rounding_ambiguous"] == 2.0
    assert rep.metrics[f"summary/{tag}/snig/ambiguous_rows_differing"] == 1.0
    assert rep.metrics[f"summary/{tag}/snig/exact_outside_ambiguous"] == 1.0
    # a row outside the ambiguous ones fails
    model2, _ = _fake_model(compose, tmp_path, monkeypatch, 0, ["model.baselines=[]"])
    model2.nets[0].meta["ambiguous"] = np.array(free[:1], np.int64)
    monkeypatch.setattr(_FakeRunner, "answer", np.array(sorted(gold + free[1:2]), np.int64))
    model2.execute()
    assert not model2.rows[0]["ok"] and "outside the rounding-ambiguous rows" in model2.failures[0]


def test_official_file_mismatch_is_arbitrated(compose, tmp_path, monkeypatch):
    model, _ = _fake_model(compose, tmp_path, monkeypatch, 0, ["model.baselines=[]"])
    net = model.nets[0]
    net.meta["golden_from"], net.meta["ambiguous"] = "official file", None    # checked row for row
    gold = [int(c) for c in net.golden]
    extra = next(r for r in range(net.images) if r not in gold)
    monkeypatch.setattr(_FakeRunner, "answer", np.array(sorted(gold + [extra]), np.int64))
    model.execute()
    assert not model.rows[0]["ok"] and model.rows[0]["ambiguous"] == "-"
    assert f"the exact semantics says {extra}: not" in model.failures[0]


def test_budget_exhausted_keeps_one_checked_pass_and_skips_baselines(compose, tmp_path, monkeypatch):
    model, notices = _fake_model(compose, tmp_path, monkeypatch, 1e-9)
    model.execute()
    assert [r["variant"] for r in model.rows] == ["snig"] and model.rows[0]["ok"]
    assert _FakeRunner.passes == ["profile"] and model.rows[0]["passes"] == "profile"
    assert [s.split("/")[1] for s in model.skipped] == ["bf", "cusparse"] and not model.failures
    assert any("skipped" in n for n in notices)
    rep = model.report()
    assert any("budget_s" in n for n in rep.notes)


def test_report_with_paper_cells_missing_a_variant(compose, tmp_path, monkeypatch):
    # the paper has no bf number at 65536 x 480 / 1920 (null in snig_table3): the report skips it
    model, _ = _fake_model(compose, tmp_path, monkeypatch, 0, ["model.paper={1024x4: {snig: 295.0, bf: null}}"])
    model.execute()
    rep = model.report()
    by = {r["variant"]: r for r in model.rows}
    assert by["snig"]["paper_geps"] == 295.0 and "paper_geps" not in by["bf"] and "paper_geps" in rep.columns
    assert "table3.png" in rep.figures


def test_budget_config_is_checked(compose):
    from pipeline.config import validate
    cfg = compose(["model=sparse_dnn", "model.budget_s=-1"])
    with pytest.raises(Exception, match="model.budget_s"):
        validate(cfg)
    assert OmegaConf.select(compose(["model=sparse_dnn"]), "model.budget_s") == 420


def test_live_work_counts_live_rows_times_layer_edges():
    from pipeline.data import hpec
    from pipeline.models.sparse_dnn.model import live_work
    W = [sp.random(8, 8, density=0.25, format="csr", random_state=k, dtype=np.float32) for k in range(3)]
    Y0 = sp.csr_matrix(np.array([[1, 0, 0, 0, 0, 0, 0, 0], [0] * 8, [0, 1, 1, 0, 0, 0, 0, 0]], np.float32))
    net = hpec.Network(name="t", N=8, bias=-0.1, ymax=32.0, layers=W, Y0=Y0)
    assert live_work(net) is None                        # no reference trace
    net.meta["ref_rows"] = np.array([2, 1, 1])           # rows alive after layers 1, 2, 3
    updates, nbytes = live_work(net)
    live_in = np.array([2, 2, 1])                        # 2 nonempty inputs, then the trace shifted
    assert updates == float(live_in @ np.array([w.nnz for w in W]))
    assert nbytes == float(live_in.sum()) * 8 * 4 * 2 + sum(w.nnz for w in W) * 8
