"""The command line on the CPU backend: a single job and a Hydra multirun, with MLflow in a tmp dir."""
from __future__ import annotations

import pytest


def _runs(store):
    from mlflow.tracking import MlflowClient
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    exps = client.search_experiments()
    return client.search_runs([e.experiment_id for e in exps], max_results=1000)


def _gpu_absent():
    from pipeline.gpu.device import why_unavailable
    return why_unavailable() is not None


def test_main_command_on_cpu(cli, tmp_path):
    if not _gpu_absent():
        pytest.skip("a GPU is present: the CPU fallback notice is not printed")
    r = cli("model=bcm", "block_size=64", fresh_store=True)   # the user's first run creates the store
    assert r.returncode == 0, r.stderr
    assert "NumPy" in r.stderr and "no GPU" in r.stderr, r.stderr    # the fallback notice
    assert "size=small" in r.stderr                                   # the preset notice
    out = r.stdout
    assert "bcm on CPU (NumPy)" in out
    header = next(ln for ln in out.splitlines() if ln.startswith("case"))
    for col in ("variant", "median_ms", "rel_err", "ok"):
        assert col in header
    assert "cpu_fft" in out and "cpu_dense" in out
    runs = _runs(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.params["block_size"] == "64"
    assert runs[0].data.tags["backend"] == "cpu"
    assert "summary/objective" in runs[0].data.metrics
    from mlflow.tracking import MlflowClient
    arts = {a.path for a in MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").list_artifacts(runs[0].info.run_id)}
    assert {"config.yaml", "results.csv", "results.md", "hydra"} <= arts, arts
    assert any(a.endswith(".png") for a in arts), arts


def test_cuda_backend_without_gpu_fails_cleanly(cli, tmp_path):
    if not _gpu_absent():
        pytest.skip("a GPU is present")
    r = cli("model=bcm", "backend=cuda")
    assert r.returncode == 3, r.stderr
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "backend=cpu" in err[0], r.stderr
    runs = _runs(tmp_path)
    assert [x.info.status for x in runs] == ["FAILED"]


@pytest.mark.slow
def test_multirun_parent_and_children(cli, tmp_path):
    r = cli("-m", "model=bcm", "backend=cpu", "block_size=16,32", "bench.min_repeats=2", "bench.min_time_ms=1",
            fresh_store=True)   # the sweep creates the store before its jobs start
    assert r.returncode == 0, r.stderr
    assert "sweep summary" in r.stderr, r.stderr
    summary = r.stderr[r.stderr.index("sweep summary"):]
    assert "block_size=16" in summary and "block_size=32" in summary and "objective" in summary
    runs = _runs(tmp_path)
    parents = [x for x in runs if x.data.tags.get("sweep") == "true"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    children = [x for x in runs if x.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 2 and len(runs) == 3
    assert sorted(c.data.params["block_size"] for c in children) == ["16", "32"]
    assert all(c.info.status == "FINISHED" for c in children)
    assert all(c.info.experiment_id == parent.info.experiment_id for c in children)
    from mlflow.tracking import MlflowClient
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"sweep_summary.csv", "sweep_summary.md", "sweep_objective.png"} <= names


def test_sweep_plot_draws_the_objective_against_the_swept_knob():
    from pipeline.tracking import sweep_plot, swept_knobs
    rows = [{"run": "model=bcm block_size=32 seed=0", "objective": 2.0},
            {"run": "model=bcm block_size=16 seed=0", "objective": 3.0},
            {"run": "model=bcm block_size=64 seed=0", "objective": float("nan")},   # no objective: left out
            {"run": "model=bcm block_size=8 seed=0", "status": "FAILED"}]
    assert swept_knobs([r["run"] for r in rows]) == {"block_size": ["32", "16", "64", "8"]}
    ax = sweep_plot(rows).axes[0]
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [16.0, 32.0] and list(line.get_ydata()) == [3.0, 2.0]
    assert ax.get_xlabel() == "block_size"
    bars = sweep_plot([{"run": "kernel=a", "objective": 1.0}, {"run": "kernel=b", "objective": 2.0}]).axes[0]
    assert [t.get_text() for t in bars.get_xticklabels()] == ["kernel=a", "kernel=b"]
    assert sweep_plot([{"run": "kernel=a", "status": "FAILED"}]) is None


@pytest.mark.slow
def test_multirun_with_a_failing_job_ends_parent_failed(cli, tmp_path):
    # the second job passes validation and fails its check (no relative error is <= 0) while it runs
    r = cli("-m", "model=bcm", "backend=cpu", "model.tolerance=1e-4,0", "bench.min_repeats=2", "bench.min_time_ms=1")
    assert r.returncode != 0
    assert any(ln.startswith("error: ") and "check(s) failed" in ln for ln in r.stderr.splitlines()), r.stderr
    runs = _runs(tmp_path)
    assert not [x for x in runs if x.info.status == "RUNNING"]
    parent = next(x for x in runs if x.data.tags.get("sweep") == "true")
    assert parent.info.status == "FAILED"
    kids = [x for x in runs if x.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(x.info.status for x in kids) == ["FAILED", "FINISHED"]


@pytest.mark.slow
def test_sigterm_marks_run_killed(tmp_path, mlflow_template):
    """A job stopped by SIGTERM (timeout, kill) ends KILLED in MLflow, not RUNNING."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    ROOT = Path(__file__).resolve().parents[1]
    shutil.copy(mlflow_template, tmp_path / "mlflow.db")
    cmd = [sys.executable, "-m", "pipeline", f"tracking.dir={tmp_path}", "progress=false",
           f"hydra.run.dir={tmp_path}/run", "model=bcm", "backend=cpu", "block_size=16",
           "bench.min_time_ms=600000", "bench.max_repeats=100000000"]
    p = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and p.poll() is None:
            runs = _runs(tmp_path)
            if runs and runs[0].info.status == "RUNNING" and "backend" in runs[0].data.tags:
                break
            time.sleep(0.5)
        assert p.poll() is None, p.communicate()
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "error: interrupted" in err
    [run] = _runs(tmp_path)
    assert run.info.status == "KILLED"


@pytest.mark.slow
def test_cfg_job_shows_the_values_in_effect(cli):
    """`--cfg job` prints each model's own defaults and a typed value, not interpolations."""
    r = cli("model=wide_lr", "--cfg=job", timeout=120)
    assert r.returncode == 0, r.stderr
    model = r.stdout[r.stdout.index("model:"):r.stdout.index("dataset:")]
    assert "  batch_size: 1024\n" in model and "  epochs: 100\n" in model, model
    assert "${" not in r.stdout
    r = cli("model=wide_lr", "batch_size=512", "--cfg=job", timeout=120)
    model = r.stdout[r.stdout.index("model:"):r.stdout.index("dataset:")]
    assert "  batch_size: 512\n" in model, model
    r = cli("model=bcm_cnn", "--cfg=job", timeout=120)
    model = r.stdout[r.stdout.index("model:"):r.stdout.index("dataset:")]
    assert "  block_size: 32\n" in model and "  batch_size: 128\n" in model, model


@pytest.mark.slow
def test_help_says_what_kernel_is(cli):
    r = cli("--help", timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "kernel      the one variant under test: kernel=<variant> is short for model.variants=[<variant>]" in out
    assert any(ln.split()[:2] == ["sparse_dnn", "GPU:"] and "snig" in ln for ln in out.splitlines()), out
    assert "${" not in out
    # the options a user types: no schema entries, no suite lists (not a group), tracking=server named
    assert "schema_" not in out and "suite:" not in out
    assert "tracking: off, server, sqlite" in out and "server (a tracking server" in out


def test_bad_variant_opens_no_mlflow_run(cli, tmp_path):
    r = cli("model=sparse_dnn", "kernel=dft", timeout=120)
    assert r.returncode == 2, r.stderr
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert err == ["error: kernel='dft' is not allowed: one of snig, pull, cluster, bf, cusparse, cpu for model=sparse_dnn"], r.stderr
    assert _runs(tmp_path) == []


@pytest.mark.parametrize("overrides, key", [
    (["+model.foo=1"], "model.foo"), (["+foo_typo=1"], "foo_typo"),
    (["model=wide_lr", "+model.lr_typo=0.1"], "model.lr_typo")])
def test_added_typo_fails_before_any_run(cli, tmp_path, overrides, key):
    r = cli(*overrides, timeout=120)
    assert r.returncode == 2, r.stderr
    assert f"error: {key} is not a known key" in r.stderr, r.stderr
    assert _runs(tmp_path) == []
