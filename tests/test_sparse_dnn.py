"""CPU tests of model=sparse_dnn: loaders (npz, official TSV, malformed files), the reference on
the official golden subset, the RadiX-Net generator's structure, MNIST inputs, config checks, CLI."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.data import hpec, radixnet
from pipeline.errors import DataError
from pipeline.models.sparse_dnn import reference as ref

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "hpec-1024"
# the data directory of the config (env PIPELINE_DATA_DIR, else data/ of the project)
MNIST = Path(os.environ.get("PIPELINE_DATA_DIR") or ROOT / "data") / "mnist"


@pytest.fixture(scope="module")
def net():
    return hpec.load_npz(DATA)


# ---------------------------------------------------------------------------- reference

@pytest.mark.parametrize("shortcut", [False, True])
@pytest.mark.slow
def test_reference_reproduces_official_golden_subset(net, shortcut):
    cats, rows = ref.infer(net.Y0, net.layers, net.bias, net.ymax, shortcut=shortcut)
    assert net.golden.tolist() == [286, 294, 385, 426, 427, 528, 570, 665, 756, 942, 944, 1030, 1096, 1097,
                                   1176, 1183, 1189, 1193, 1199]
    assert np.array_equal(cats, net.golden)
    full = net.meta["golden_full"]
    assert np.array_equal(cats, full[full < 1200])
    trace = np.load(DATA / "trace_subset.npz")
    assert np.array_equal(rows, trace["scipy_f32_rows"])
    assert rows[:13].tolist() == [1098, 786, 415, 195, 98, 56, 31, 22, 21, 21, 20, 20, 20]


def test_reference_parallel_equals_serial(net):
    cats, rows = ref.infer(net.Y0, net.layers, net.bias, net.ymax)
    pc, pr = ref.infer_parallel(net.Y0, net.layers, net.bias, net.ymax, workers=3)
    assert np.array_equal(pc, cats) and np.array_equal(pr, rows)


def test_reference_bias_only_on_nonzeros():
    # a positive bias must not switch on structural zeros (MATLAB reference semantics)
    Y = sp.csr_matrix(np.array([[1, 0], [0, 0]], np.float32))
    W = sp.csr_matrix(np.array([[2, 0], [0, 1]], np.float32))
    Z = ref.layer_step(Y, W, 0.5, 32.0).toarray()
    assert Z.tolist() == [[2.5, 0.0], [0.0, 0.0]]
    Z = ref.layer_step(sp.csr_matrix(np.array([[40, 0]], np.float32)), W, -0.3, 32.0).toarray()
    assert Z.tolist() == [[32.0, 0.0]]           # clipped at ymax


# ---------------------------------------------------------------------------- generator

def test_radixnet_reproduces_official_group0_and_structure(net):
    d = radixnet.depth(1024)
    assert d == 6
    keys = lambda A: [tuple(A.indices[A.indptr[i]:A.indptr[i + 1]]) for i in range(A.shape[0])]  # noqa: E731
    src = None
    for l in range(1, net.L + 1):
        W = net.layers[l - 1]
        if l <= d:   # group 0 (P_0 = I): exactly the official layers
            assert (W != radixnet.layer(1024, l)).nnz == 0, l
        B = radixnet.base_pattern(1024, l)
        if (l - 1) % d == 0:  # p = 1: row patterns are unique up to the 16 identical copies
            kb = {k: i for i, k in enumerate(keys(B))}
            src = np.array([kb[k] for k in keys(W)])
        # official W_l = P_g B_l with one row permutation per group of d layers
        assert (W != B[src]).nnz == 0, l
        assert np.all(W.data == np.float32(1 / 16))


@pytest.mark.parametrize("N", [1024, 4096, 16384, 65536])
def test_radixnet_structure_all_sizes(N):
    d = radixnet.depth(N)
    assert d == {1024: 6, 4096: 8, 16384: 10, 65536: 12}[N]
    for l in (1, d, d + 1):
        W = radixnet.layer(N, l, seed=3)
        assert W.shape == (N, N) and W.nnz == 32 * N and W.dtype == np.float32
        assert np.all(np.diff(W.indptr) == 32)
        assert np.all(np.bincount(W.indices, minlength=N) == 32)
        assert np.all(W.data == np.float32(1 / 16))
    # layers of one group share the permutation; the next group's differs and is seeded
    perm = radixnet.group_permutation(N, 1, 3)
    assert np.array_equal(perm, radixnet.group_permutation(N, 1, 3))
    assert not np.array_equal(perm, radixnet.group_permutation(N, 2, 3))
    assert np.array_equal(radixnet.group_permutation(N, 0, 3), np.arange(N))


def test_radixnet_edges_match_table1():
    """The generated networks have Table 1's edge counts at 120 layers."""
    for N, e120 in ((1024, 3.9e6), (4096, 15.7e6), (16384, 62.9e6), (65536, 251.7e6)):
        edges = sum(radixnet.layer(N, l).nnz for l in (1, radixnet.depth(N))) / 2 * 120
        assert abs(edges - e120) / e120 < 0.01, (N, edges)


@pytest.mark.skipif(not MNIST.is_dir(), reason=f"MNIST not in {MNIST}")
def test_mnist_inputs_density_and_layout():
    from pipeline.data.mnist import read_idx
    imgs = read_idx(MNIST / "train-images-idx3-ubyte.gz")[:1000]
    a = radixnet.mnist_inputs(imgs, 1024, 1000)
    Y = sp.csr_matrix((a["data"], a["indices"], a["indptr"]), shape=tuple(a["shape"]))
    assert Y.shape == (1000, 1024) and np.all(Y.data == 1)
    per = Y.nnz / 1000
    assert 80 < per < 135, per               # Table 1: ~106 per image (official subset: 102.3)
    img = Y[0].toarray().reshape(32, 32)      # pixel = row * 32 + col: the digit sits in the middle
    assert img[:3].sum() == 0 and img[12:20, 8:24].sum() > 0


def test_random_inputs_density_and_survival():
    a = radixnet.random_inputs(4096, 500, seed=1)
    per = len(a["data"]) / 500
    assert abs(per - 417) < 20
    Y = sp.csr_matrix((a["data"], a["indices"], a["indptr"]), shape=tuple(a["shape"]))
    cats, rows = ref.infer(Y, radixnet.network_layers(4096, 16, 1), radixnet.BIAS[4096], 32.0)
    assert 0 < cats.size < 500          # blobs survive a few layers, unlike scattered pixels


# ---------------------------------------------------------------------------- loaders

def _write_official(folder: Path, net, L: int, n_img: int, golden=None):
    wdir = folder / "neuron1024"
    wdir.mkdir(parents=True)
    for l in range(L):
        hpec.write_tsv_layer(wdir / f"n1024-l{l + 1}.tsv", net.layers[l])
    coo = net.Y0[:n_img].tocoo()
    with open(folder / "sparse-images-1024.tsv", "w") as f:
        for r, c, v in zip(coo.row, coo.col, coo.data):
            f.write(f"{r + 1}\t{c + 1}\t{v:g}\n")
    if golden is not None:
        (folder / f"neuron1024-l{L}-categories.tsv").write_text("".join(f"{g + 1}\n" for g in golden))


@pytest.mark.slow
def test_tsv_loader_round_trip(tmp_path, net):
    L = 12
    ref12, _ = ref.infer(net.Y0, net.layers[:L], net.bias, net.ymax)
    _write_official(tmp_path / "d", net, L, 1200, golden=ref12)
    cache = tmp_path / "cache"
    t = hpec.load_tsv(tmp_path / "d", 1024, L, cache_dir=str(cache))
    assert t.L == L and t.Y0.shape == (1200, 1024) and t.bias == pytest.approx(-0.3)
    for a, b in zip(t.layers, net.layers):
        assert (a != b).nnz == 0
    assert (t.Y0 != net.Y0).nnz == 0
    assert np.array_equal(t.golden, ref12)
    assert len(list(cache.glob("*.npz"))) == L + 1     # every layer + the images, cached
    t2 = hpec.load_tsv(tmp_path / "d", 1024, L, images=600, cache_dir=str(cache))
    assert t2.Y0.shape == (600, 1024) and np.array_equal(t2.golden, ref12[ref12 < 600])
    cats, _ = ref.infer(t.Y0, t.layers, t.bias, t.ymax)
    assert np.array_equal(cats, t.golden)


BAD_LAYERS = [
    ("1\t1\t0.0625\n2\t5\n", 2, "2 field"),
    ("1\t1\t0.0625\n2\tx\t0.0625\n", 2, "not a number"),
    ("1\t1\t0.0625\n2\t1.5\t0.0625\n", 2, "not an integer"),
    ("1\t1\t0.0625\n0\t3\t0.0625\n1024\t1024\t1\n", 2, "out of range"),
    ("1\t1\t0.0625\n3\t2048\t0.0625\n", 2, "> N=1024"),
    ("1\t1\t0.0625\n3\t512\t0.0625\n", 2, "differs from N"),
    ("1\t1\t0.0625\n\n1024\t3\t1\n", 2, "empty line"),
    ("1\t1\t0.0625\n1024\t1024\t1\n1\t1\t0.5\n", 3, "duplicate"),
]


@pytest.mark.parametrize("text,line,what", BAD_LAYERS)
def test_malformed_layer_names_file_and_line(tmp_path, text, line, what):
    p = tmp_path / "n1024-l1.tsv"
    p.write_text(text)
    with pytest.raises(DataError) as e:
        hpec.read_layer_tsv(p, 1024)
    msg = str(e.value)
    assert f"{p}:{line}:" in msg and what in msg and "\n" not in msg


def test_broken_layer_caches_nothing(tmp_path, net):
    _write_official(tmp_path / "d", net, 3, 50)
    bad = tmp_path / "d" / "neuron1024" / "n1024-l2.tsv"
    lines = bad.read_text().splitlines()
    lines[99] = "7\toops\t0.0625"
    bad.write_text("\n".join(lines) + "\n")
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"n1024-l2.tsv:100: field 2 'oops'"):
        hpec.load_tsv(tmp_path / "d", 1024, 3, cache_dir=str(cache))
    cached = sorted(p.name for p in cache.glob("*")) if cache.exists() else []
    assert len(cached) == 1                     # layer 1 only; nothing from the broken layer 2
    assert not any(p.name.startswith(".") for p in cache.glob("*"))


def test_golden_file_errors(tmp_path):
    p = tmp_path / "neuron1024-l120-categories.tsv"
    p.write_text("3\n5\n4\n")
    with pytest.raises(DataError, match=r"categories.tsv:3: image index 4 is not ascending"):
        hpec.read_categories_tsv(p, 60000)
    p.write_text("3\n5\n9\n")
    with pytest.raises(DataError, match=r"categories.tsv:3: the golden file has 3 lines but .* 1812"):
        hpec.read_categories_tsv(p, 60000, expected=1812)
    p.write_text("3\n5 6\n")
    with pytest.raises(DataError, match=r"categories.tsv:2: 2 field"):
        hpec.read_categories_tsv(p, 60000)


def test_images_out_of_range(tmp_path):
    p = tmp_path / "sparse-images-1024.tsv"
    p.write_text("1\t1\t1\n2\t1025\t1\n")
    with pytest.raises(DataError, match=r"sparse-images-1024.tsv:2: pixel \(neuron\) index 1025 is out of range"):
        hpec.read_images_tsv(p, 1024)


def test_missing_layer_file(tmp_path, net):
    _write_official(tmp_path / "d", net, 2, 10)
    with pytest.raises(DataError, match=r"n1024-l3.tsv: missing weight layer"):
        hpec.load_tsv(tmp_path / "d", 1024, 3)


def test_npz_loader_checks(tmp_path, net):
    assert net.N == 1024 and net.L == 120 and net.images == 1200 and net.Y0.nnz == 122713
    assert net.edges() == 120 * 32768 and net.bias == pytest.approx(-0.3)
    with pytest.raises(DataError, match="holds 120 layers"):
        hpec.load_npz(DATA, L=121)
    with pytest.raises(DataError, match="weights.npz: missing"):
        hpec.load_npz(tmp_path)


# ---------------------------------------------------------------------------- GPU helpers on the host

def test_section_sizes():
    from pipeline.models.sparse_dnn.gpu import sections
    default = 48 * 1024
    # snig keeps 64-bit fixed-point sums: 8 bytes per output neuron of a section
    assert [sections(N, default) for N in (1024, 4096, 16384, 65536)] == [1, 1, 4, 16]
    optin = 227 * 1024 - 1024
    assert [sections(N, optin) for N in (1024, 4096, 16384, 65536)] == [1, 1, 1, 4]
    assert [sections(N, default, elem=4) for N in (1024, 4096, 16384, 65536)] == [1, 1, 2, 8]
    assert sections(1024, default, 4) == 4


# ---------------------------------------------------------------------------- config + CLI

def test_config_composes(compose):
    cfg = compose(["model=sparse_dnn"])
    assert cfg.kernel.name == "snig" and cfg.dataset.format == "npz" and list(cfg.model.baselines) == ["bf", "cusparse"]
    cfg = compose(["model=sparse_dnn", "experiment=snig_table3"])
    assert len(cfg.model.grid) == 12 and cfg.model.paper["65536x1920"]["snig"] == pytest.approx(1489.46)


def test_snig_table3_small_preset_is_one_small_network(compose, tmp_path):
    """On size=small the grid gives way (model.small) to the dataset's small network (dataset.small)."""
    from pipeline.config import validate
    from pipeline.context import make_context
    cfg = compose(["experiment=snig_table3", "backend=cpu"])
    validate(cfg)
    notices = make_context(cfg, tmp_path).notices
    assert list(cfg.model.grid) == [] and (cfg.dataset.neurons, cfg.dataset.layers) == (1024, 24)
    assert "size=small: model grid=[] (model.small; model.small=null keeps the full settings)" in notices


def test_small_preset_runs_the_dataset_small_block_and_times_in_ms(prepared):
    """size=small: a RadiX-Net shrinks to dataset.small's network (said in one line); the table,
    the summary metrics and the fastest line time a pass in ms (median_ms, iqr_ms, compute_ms)."""
    from pipeline.headline import fastest_lines
    m, ctx = prepared("model=sparse_dnn", "backend=cpu", "dataset=radixnet_4096", "dataset.inputs=random",
                      "dataset.small.layers=4", "dataset.small.images=60", "model.repeats=2", "model.warmup=0")
    assert [(n.N, n.L, n.images) for n in m.nets] == [(1024, 4, 60)]
    assert ("size=small: dataset neurons=1024 layers=4 images=60 (dataset.small; dataset.small=null keeps the "
            "full settings)") in ctx.notices
    m.execute()
    rep = m.report()
    row = rep.rows[0]
    assert {"median_ms", "iqr_ms", "transfer_ms", "compute_ms"} <= set(rep.columns)
    assert not [c for c in rep.columns if c.endswith("_s")]
    assert rep.metrics["summary/objective"] == rep.metrics["summary/1024x4/cpu/median_ms"] == row["median_ms"]
    assert row["compute_ms"] == row["median_ms"] and row["rate_geps"] == pytest.approx(
        m.nets[0].edges() * 60 / (row["median_ms"] * 1e-3) / 1e9)
    line, = fastest_lines(rep.rows, measures=rep.measures)
    assert line.startswith("network=radixnet-1024-l4 N=1024 L=4 images=60: fastest: cpu ")
    assert line.endswith(" ms a pass")


@pytest.mark.parametrize("override,key", [
    ("model.num_secs=3", "model.num_secs"),
    ("model.block=[4,512]", "model.block"),
    ("dataset.format=csv", "dataset.format"),
    ("kernel=fused", "kernel"),
    ("dataset=radixnet_1024 dataset.small.layers=0", "dataset.small.layers=0 is not allowed"),   # the small preset
    ("dataset=radixnet_1024 dataset.small.neurons=100", "dataset.small.neurons=100 is not allowed"),
    ("dataset=radixnet_1024 +dataset.small.depth=4", "dataset.small.depth=4 is not allowed: a key of dataset="),
])
def test_config_errors(compose, override, key):
    from pipeline.config import validate
    from pipeline.errors import ConfigError
    cfg = compose(["model=sparse_dnn", *override.split()])
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(cfg)


@pytest.mark.slow
def test_cli_cpu_official(cli):
    r = cli("model=sparse_dnn", "backend=cpu")
    assert r.returncode == 0, r.stderr
    assert "hpec-1024-l120" in r.stdout and " ok " in r.stdout
    assert "need a GPU" in r.stderr


@pytest.mark.slow
def test_cli_cpu_pull_falls_back_to_the_reference(cli):
    r = cli("model=sparse_dnn", "backend=cpu", "kernel=pull", "dataset.layers=12")
    assert r.returncode == 0, r.stderr
    assert "CPU backend: pull needs a GPU; running 'cpu'" in r.stderr and "hpec-1024-l12" in r.stdout and " ok " in r.stdout


def test_pull_config_is_checked(compose):
    from pipeline.config import validate
    from pipeline.errors import ConfigError
    validate(compose(["model=sparse_dnn", "kernel=pull", "model.pull_neurons_per_warp=8"]))
    with pytest.raises(ConfigError, match=r"model\.pull_neurons_per_warp"):
        validate(compose(["model=sparse_dnn", "model.pull_neurons_per_warp=0"]))


@pytest.mark.slow
def test_cli_cpu_radixnet_small(cli):
    r = cli("model=sparse_dnn", "backend=cpu", "dataset=radixnet_4096", "dataset.inputs=random",
            "dataset.small.layers=12", "dataset.small.images=200")
    assert r.returncode == 0, r.stderr
    assert "radixnet-1024-l12" in r.stdout and " ok " in r.stdout


@pytest.mark.slow
def test_cli_bad_tsv_fails_cleanly(cli, tmp_path):
    d = tmp_path / "data" / "bad"
    (d / "neuron1024").mkdir(parents=True)
    (d / "neuron1024" / "n1024-l1.tsv").write_text("1\t1\t0.0625\n1\t2\n")
    (d / "sparse-images-1024.tsv").write_text("1\t1\t1\n")
    r = cli("model=sparse_dnn", "backend=cpu", "dataset=hpec_tsv", "dataset.path=bad", "dataset.layers=1",
            f"data_dir={tmp_path / 'data'}", f"cache_dir={tmp_path / 'cache'}")
    assert r.returncode != 0
    assert "n1024-l1.tsv:2: 2 field(s)" in r.stderr
    assert not list((tmp_path / "cache").glob("hpec-*")) if (tmp_path / "cache").exists() else True


@pytest.mark.parametrize("S", [1, 2, 8])
def test_sectioned_csr_packing(net, S):
    from pipeline.models.sparse_dnn.gpu import pack_csc, pack_sectioned
    N = net.N
    sec = N // S
    packed, cap = pack_sectioned(net.layers[:3], S, alloc=np.zeros)
    for l in range(3):
        row = packed[l]
        ptr = row[: S * N + 1]
        cols = row[S * N + 1: S * N + 1 + ptr[-1]]
        vals = row[S * N + 1 + cap: S * N + 1 + cap + ptr[-1]].view(np.float32)
        i = np.repeat(np.arange(S * N) % N, np.diff(ptr))        # row t*N + i -> input neuron i
        t = np.repeat(np.arange(S * N) // N, np.diff(ptr))
        assert np.all(cols // sec == t)                             # every entry lies in its section
        W = sp.csr_matrix((vals, (i, cols)), shape=(N, N))
        assert (W != net.layers[l]).nnz == 0
    c, cap = pack_csc(net.layers[:2], alloc=np.zeros)
    C = sp.csr_matrix((c[1][N + 1 + cap: N + 1 + cap + 32768].view(np.float32), c[1][N + 1: N + 1 + 32768],
                       c[1][: N + 1]), shape=(N, N))
    assert (C.T != net.layers[1]).nnz == 0


@pytest.mark.slow
def test_cli_golden_mismatch_fails_run(cli, tmp_path, net):
    d = tmp_path / "data" / "tiny"
    _write_official(d, net, 3, 100, golden=np.array([0, 1, 2]))     # a wrong golden set
    r = cli("model=sparse_dnn", "backend=cpu", "dataset=hpec_tsv", "dataset.path=tiny", "dataset.layers=3",
            f"data_dir={tmp_path / 'data'}", f"cache_dir={tmp_path / 'cache'}")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "categories differ from the golden set (" in r.stderr
    assert "tiny" in r.stderr.split("categories differ from the golden set (", 1)[1]   # names the files


# ---------------------------------------------------------------------------- cluster layout, default variants

def _unpack_clusters(words, ncl, utot, N, g):
    """W back from a cluster_layer row; also checks that padding columns carry no weight."""
    wv = words[: g * utot].view(np.float32).reshape(utot, g)
    uidx = words[g * utot: (g + 1) * utot]
    uptr = words[(g + 1) * utot: (g + 1) * utot + ncl + 1]
    gidx = words[(g + 1) * utot + ncl + 1:].reshape(ncl, g)
    assert words.size == (g + 1) * utot + ncl + 1 + ncl * g and uptr[0] == 0 and uptr[-1] == utot
    rows, cols, vals = [], [], []
    for c in range(ncl):
        lst = uidx[uptr[c]: uptr[c + 1]]
        assert np.all(np.diff(lst) > 0)                       # CSC order: the pull kernel's FMA order
        for j in range(g):
            if gidx[c, j] < 0:
                assert not wv[uptr[c]: uptr[c + 1], j].any()
                continue
            rows += lst.tolist()
            cols += [int(gidx[c, j])] * lst.size
            vals += wv[uptr[c]: uptr[c + 1], j].tolist()
    out = gidx[gidx >= 0]
    assert np.array_equal(np.sort(out), np.arange(N))          # every output exactly once
    return sp.csr_matrix((np.asarray(vals, np.float32), (rows, cols)), shape=(N, N))


def test_cluster_layout_round_trip():
    from pipeline.models.sparse_dnn.gpu import CL_G, cluster_bytes, cluster_layer
    from test_sparse_dnn_gpu import shared_list_layer
    W = radixnet.layer(1024, 3, seed=0)
    words, ncl, utot = cluster_layer(W)
    assert (ncl, utot) == (1024 // 16, 2 * 1024)                # RadiX-Net: 16 outputs share each 32-input list
    assert (_unpack_clusters(words, ncl, utot, 1024, CL_G) != W).nnz == 0
    assert cluster_bytes(1024, 1) >= words.nbytes
    rng = np.random.default_rng(5)
    W = shared_list_layer(500, rng)                             # empty lists, lists > 32, groups > 16
    words, ncl, utot = cluster_layer(W)
    R = _unpack_clusters(words, ncl, utot, 500, CL_G)
    assert (R != W).nnz == 0 and np.array_equal(R.data, W.data)
    W = sp.random(300, 300, density=0.05, random_state=2, format="csr", dtype=np.float32)   # nothing shared
    words, ncl, utot = cluster_layer(W)
    assert (_unpack_clusters(words, ncl, utot, 300, CL_G) != W).nnz == 0


def test_default_times_snig_beside_the_fastest(compose):
    from pipeline.models.sparse_dnn.variants import REGISTRY
    cfg = compose(["model=sparse_dnn"])
    assert REGISTRY.check(cfg) == ["snig", "cluster"] and list(cfg.model.baselines) == ["bf", "cusparse"]
    assert all(REGISTRY[v].kind == "ours" for v in REGISTRY.check(cfg))
    assert REGISTRY.check(compose(["model=sparse_dnn", "kernel=pull"])) == ["pull"]
    assert REGISTRY.check(compose(["model=sparse_dnn", "model.variants=[bf]"])) == ["bf"]


def test_passes_are_timed_through_the_shared_timer():
    from pipeline.models.sparse_dnn.model import _passes
    from pipeline.timing import time_cpu
    calls = []
    t = time_cpu(lambda: calls.append(1), _passes(3, 2))
    assert t.n == 3 and len(calls) == 5
    calls.clear()
    assert time_cpu(lambda: calls.append(1), _passes(1, 0)).n == 1 and len(calls) == 1
