"""Multi-GPU coordinator of model=sparse_dnn (multi.py). CPU tests run the coordinator with worker
processes that use the SciPy reference: same categories as in-process, every batch handed out
exactly once and dynamically, worker failures as one-line errors with no process left behind,
model.gpus checks, the CLI. GPU tests run it on the official subset with 1 GPU and with all GPUs."""
from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from omegaconf import OmegaConf

from pipeline.data import hpec, radixnet
from pipeline.errors import ConfigError, GpuError
from pipeline.models.sparse_dnn import multi
from pipeline.models.sparse_dnn import reference as ref

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small_net():
    a = radixnet.random_inputs(1024, 400, seed=3)
    Y0 = sp.csr_matrix((a["data"], a["indices"], a["indptr"]), shape=tuple(a["shape"]))
    net = radixnet.make_network(1024, 12, Y0, seed=3)
    net.golden, _ = ref.infer(net.Y0, net.layers, net.bias, net.ymax)
    assert 0 < net.golden.size < net.images
    return net


@pytest.fixture
def model_cfg(compose):
    return OmegaConf.to_container(compose(["model=sparse_dnn"]).model, resolve=True)


def _no_children():
    deadline = time.time() + 10
    while multiprocessing.active_children() and time.time() < deadline:
        time.sleep(0.1)
    return not multiprocessing.active_children()


# Runner factories for the worker processes (module level: the spawned workers import them).

def slow_first(index, net, cfg_model, variant, notice):
    """Worker 0 takes 0.3 s longer per batch: dynamic claiming gives the others more batches."""
    runner = multi.make_runner(index, net, cfg_model, variant, notice)
    if index == 0:
        run = runner.run
        runner.run = lambda lo, hi: (time.sleep(0.3), run(lo, hi))[1]
    return runner


def failing(index, net, cfg_model, variant, notice):
    """Worker 1 fails: while building ('build'), in its first batch ('run') or hard ('exit')."""
    mode = cfg_model["fail"]
    if index == 1 and mode == "build":
        raise RuntimeError("injected\nbuild failure")
    runner = multi.make_runner(index, net, cfg_model, variant, notice)
    if index == 1:
        def run(lo, hi):
            if mode == "exit":
                os._exit(7)
            raise ValueError(f"injected failure in batch [{lo}, {hi})")
        runner.run = run
    return runner


# ---------------------------------------------------------------------------- CPU

@pytest.mark.parametrize("workers,batch", [(2, 50), (3, 64)])
@pytest.mark.slow
def test_coordinator_equals_in_process_reference(small_net, model_cfg, workers, batch):
    res = multi.run(small_net, "cpu", model_cfg, workers, batch, small_net.images, warmup=1, repeats=2)
    assert np.array_equal(res.categories, small_net.golden)
    assert not res.disagree and len(res.times) == 2 and all(t > 0 for t in res.times)
    nb = -(-small_net.images // batch)
    assert res.batches[0] == (0, batch) and res.batches[-1][1] == small_net.images and len(res.batches) == nb
    for owners in res.owners:                         # every batch of every timed pass ran once
        assert len(owners) == nb and set(owners) <= set(range(workers))
    assert sum(res.claimed) == 2 * nb and len(res.claimed) == workers
    assert _no_children()


@pytest.mark.slow
def test_claiming_is_dynamic(small_net, model_cfg):
    res = multi.run(small_net, "cpu", model_cfg, 2, 40, small_net.images, repeats=1, factory=slow_first)
    assert np.array_equal(res.categories, small_net.golden)
    assert len(res.owners[0]) == 10
    assert res.claimed[1] > res.claimed[0] and sum(res.claimed) == 10     # a static split gives 5 + 5
    assert res.busy_s[0] >= 0.3 * res.claimed[0]
    assert res.per_worker().startswith(f"0:{res.claimed[0]}/")


@pytest.mark.parametrize("mode,cause", [
    ("build", "worker 1 (CPU reference) failed: RuntimeError: injected build failure"),
    ("run", "worker 1 (CPU reference) failed: ValueError: injected failure in batch ["),
    ("exit", "worker 1 (CPU reference) failed: its worker process exited with code 7"),
])
@pytest.mark.slow
def test_worker_error_is_one_line_and_stops_everything(small_net, model_cfg, mode, cause):
    t0 = time.time()
    with pytest.raises(GpuError) as e:
        multi.run(small_net, "cpu", dict(model_cfg, fail=mode), 3, 20, small_net.images, repeats=3,
                  factory=failing)
    msg = str(e.value)
    assert msg.startswith("model.gpus: ") and cause in msg and "\n" not in msg
    assert _no_children() and time.time() - t0 < 60


def test_netspec_loads_the_same_network(compose, tmp_path):
    from pipeline.models.sparse_dnn.model import load_network
    cfg = compose(["model=sparse_dnn", "dataset=radixnet_4096", "dataset.inputs=random", f"cache_dir={tmp_path}"])
    net = load_network(cfg, 1024, 6, 100, True)
    spec = multi.NetSpec.of(cfg, net, True)
    again = spec.load()
    assert (again.N, again.L, again.images, again.bias) == (net.N, net.L, net.images, net.bias)
    assert (again.Y0 != net.Y0).nnz == 0 and all((a != b).nnz == 0 for a, b in zip(again.layers, net.layers))
    assert np.array_equal(again.golden, net.golden)


def test_gpus_config_checks(compose):
    from pipeline.config import validate
    with pytest.raises(ConfigError, match=r"model\.gpus=-1 is not allowed"):
        validate(compose(["model=sparse_dnn", "model.gpus=-1"]))
    validate(compose(["model=sparse_dnn", "model.gpus=0"]))
    assert compose(["model=sparse_dnn"]).model.gpus == 1
    with pytest.raises(ConfigError, match=r"model\.gpus=4 is not allowed: this machine has 2 GPU\(s\); use "
                                          r"model\.gpus=2 or model\.gpus=0"):
        multi.worker_count(4, 2)
    assert multi.worker_count(0, 3) == 3 and multi.worker_count(2, 2) == 2
    assert multi.worker_count(3, None) == 3 and 1 <= multi.worker_count(0, None) <= multi.CPU_WORKERS


@pytest.mark.parametrize("overrides,network", [
    ((), "hpec-1024-l120"),
    (("dataset=radixnet_4096", "dataset.inputs=random", "dataset.small.layers=12", "dataset.small.images=200"),
     "radixnet-1024-l12"),
])
@pytest.mark.slow
def test_cli_cpu_workers_match_one_process(cli, overrides, network):
    outs = []
    for g in (1, 2):
        r = cli("model=sparse_dnn", "backend=cpu", f"model.gpus={g}", *overrides)
        assert r.returncode == 0, r.stdout + r.stderr
        line = next(l for l in r.stdout.splitlines() if l.startswith(network))
        outs.append(line.split())
    one, two = outs                                    # network images variant kind gpus ok categories golden
    assert one[4:6] == ["1", "ok"] and two[4:6] == ["2", "ok"] and two[6:8] == one[6:8]
    assert "2 worker processes (the SciPy reference)" in r.stderr and "/" in two[-1]


# ---------------------------------------------------------------------------- GPU

@pytest.fixture(scope="module")
def official():
    return hpec.load_npz(ROOT / "data" / "hpec-1024")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["snig", "pull", "bf", "cusparse"])
def test_gpu_one_worker_official_golden(official, model_cfg, variant):
    res = multi.run(official, variant, model_cfg, 1, 300, official.images, warmup=1, repeats=2)
    assert np.array_equal(res.categories, official.golden), variant
    assert not res.disagree and res.claimed == [8]
    assert _no_children()


@pytest.mark.gpu
def test_gpu_all_workers_official_golden(official, model_cfg):
    n = multi.gpu_count()
    if n < 2:
        pytest.skip(f"needs more than one GPU ({n} present)")
    res = multi.run(official, "snig", model_cfg, n, 100, official.images, warmup=1, repeats=2)
    assert np.array_equal(res.categories, official.golden)
    assert not res.disagree and sum(res.claimed) == 24 and len(res.claimed) == n
    assert _no_children()


@pytest.mark.gpu
def test_gpu_cli_all_gpus(cli):
    r = cli("model=sparse_dnn", "backend=cuda", "model.gpus=0", "model.repeats=2")
    assert r.returncode == 0, r.stdout + r.stderr
    # the default command's rows: the paper's snig and the project's cluster, both baselines
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("hpec-1024-l120 ")]
    assert "FAIL" not in r.stdout and len(rows) == 4, r.stdout           # the table's rows (not the headline)
    assert all(row[5] == "ok" for row in rows), r.stdout               # the ok column: the golden check
    for v in ("snig", "cluster", "bf", "cusparse"):
        assert f" {v} " in r.stdout, v
