"""MLflow logging into a temporary SQLite store: params, metrics, series, artifacts, and the end
status of runs that fail, are interrupted, or belong to a sweep."""
from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from pipeline import runner, tracking
from pipeline.errors import VerificationError
from pipeline.models.base import Model
from pipeline.results import Report


@pytest.fixture(autouse=True)
def _no_sweep_env(monkeypatch):
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    monkeypatch.delenv(tracking.EXPERIMENT_ENV, raising=False)


@pytest.fixture
def store(tmp_path, mlflow_template):
    import shutil
    d = tmp_path / "store"
    d.mkdir()
    shutil.copy(mlflow_template, d / "mlflow.db")
    return d


@pytest.fixture
def cfg(compose, store):
    return compose(["model=bcm", "backend=cpu", "progress=false", f"tracking.dir={store}",
                    "bench.warmup=0", "bench.min_repeats=2", "bench.min_time_ms=1"])


def client_for(cfg):
    from mlflow.tracking import MlflowClient
    return MlflowClient(tracking.ready_store(tracking.store_dir(cfg.tracking)))


def all_runs(cfg):
    c = client_for(cfg)
    return c.search_runs([e.experiment_id for e in c.search_experiments()], max_results=1000)


class FakeModel(Model):
    """A model whose behaviour each test picks through class attributes."""
    fail_in = None          # stage name that raises RuntimeError
    failures = []

    def _maybe_fail(self, stage):
        if self.fail_in == stage:
            raise RuntimeError(f"boom in {stage}")

    def prepare(self):
        self._maybe_fail("prepare")

    def execute(self):
        self._maybe_fail("execute")

    def report(self):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3])
        rows = [{"case": "A k=8", "variant": "ours", "kind": "ours", "median_ms": 1.0, "rel_err": 1e-7,
                 "ok": True, "x_vs_base": 2.0},
                {"case": "A k=8", "variant": "base", "kind": "baseline", "median_ms": 2.0, "rel_err": 2e-7,
                 "ok": True, "gbps": 3.5}]
        return Report(rows=rows, metrics={"summary/objective": 1.0, "accuracy": np.float32(0.75),
                                          "count": np.int64(7), "nan_metric": float("nan")},
                      series={"loss": [3.0, 2.0, 1.0]}, figures={"plot": fig},
                      failures=list(self.failures), title="fake")


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(FakeModel, "fail_in", None)
    monkeypatch.setattr(FakeModel, "failures", [])
    monkeypatch.setattr(runner, "model_class", lambda impl: FakeModel)
    return FakeModel


def test_run_logs_params_metrics_artifacts(cfg, fake, tmp_path, capsys):
    out = tmp_path / "job"
    (out / ".hydra").mkdir(parents=True)
    (out / ".hydra" / "overrides.yaml").write_text("- model=bcm\n")
    runner.run(cfg, out)
    assert "fake" in capsys.readouterr().out
    assert (tmp_path / "store" / "mlflow.db").is_file()
    [run] = all_runs(cfg)
    assert run.info.status == "FINISHED"
    p = run.data.params
    assert p["model.name"] == "bcm" and p["block_size"] == "64" and p["backend"] == "cpu"
    assert p["bench.min_repeats"] == "2" and p["tracking.enabled"] == "True"
    assert p["model.layers"] == "['A']"
    assert run.data.tags["backend"] == "cpu" and run.data.tags["model"] == "bcm"
    m = run.data.metrics
    assert m["summary/objective"] == 1.0
    assert m["accuracy"] == pytest.approx(0.75) and m["count"] == 7.0
    assert "nan_metric" not in m
    # one case: names without the case (the same in every run of a sweep), the case in params
    assert m["ours/median_ms"] == 1.0 and m["ours/x_vs_base"] == 2.0 and m["base/gbps"] == 3.5
    assert "ours/ok" not in m and not any(k.startswith("A k_8/") for k in m)
    assert p["case"] == "A k=8"
    assert "stage_seconds/execute" in m and "stage_seconds/transfer" not in m
    c = client_for(cfg)
    hist = c.get_metric_history(run.info.run_id, "loss")
    assert [(h.step, h.value) for h in sorted(hist, key=lambda h: h.step)] == [(0, 3.0), (1, 2.0), (2, 1.0)]
    names = {a.path for a in c.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "results.csv", "results.md", "plot.png", "hydra", "notes.txt"} <= names, names
    notes = open(c.download_artifacts(run.info.run_id, "notes.txt", str(tmp_path / "dl"))).read()
    assert "size=small" in notes                                 # the context's notice
    local = c.download_artifacts(run.info.run_id, "results.csv", str(tmp_path / "dl"))
    header = open(local).readline().strip().split(",")
    assert "x_vs_base" in header and "gbps" in header          # every row's columns, not row 0's only
    local = c.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path / "dl"))
    logged = OmegaConf.load(local)
    assert logged.model.name == "bcm" and logged.block_size == 64
    assert "hydra/overrides.yaml" in {a.path for a in c.list_artifacts(run.info.run_id, "hydra")}
    # artifacts live beside the store, not in the working directory
    assert str(tmp_path / "store") in run.info.artifact_uri


def test_experiment_is_model_name_or_override(compose, fake, tmp_path, store):
    base = ["model=bcm", "backend=cpu", "progress=false", f"tracking.dir={store}"]
    runner.run(compose(base), tmp_path / "a", echo=False)
    runner.run(compose(base + ["tracking.experiment=mine", "tracking.run_name=r1"]), tmp_path / "b", echo=False)
    c = client_for(compose(base))
    names = {e.name for e in c.search_experiments()}
    assert {"bcm", "mine"} <= names
    [r] = c.search_runs([c.get_experiment_by_name("mine").experiment_id])
    assert r.info.run_name == "r1"


@pytest.mark.parametrize("stage", ["prepare", "execute"])
def test_raising_job_ends_failed(cfg, fake, tmp_path, stage):
    fake.fail_in = stage
    with pytest.raises(RuntimeError, match="boom"):
        runner.run(cfg, tmp_path, echo=False)
    [run] = all_runs(cfg)
    assert run.info.status == "FAILED"
    assert "boom" in run.data.tags["error"]


def test_failed_check_ends_failed_after_logging(cfg, fake, tmp_path, capsys):
    fake.failures = ["A k=8/ours: relative error nan > 1e-04"]
    with pytest.raises(VerificationError) as e:
        runner.run(cfg, tmp_path)
    assert e.value.exit_code == 4 and "A k=8/ours" in str(e.value)
    assert "FAILED checks" in capsys.readouterr().err
    [run] = all_runs(cfg)
    assert run.info.status == "FAILED"
    assert "relative error nan" in run.data.tags["failures"]
    assert run.data.metrics["summary/objective"] == 1.0        # the report was still logged


def test_keyboard_interrupt_ends_killed(cfg):
    job = tracking.JobRun(cfg)
    with pytest.raises(KeyboardInterrupt):
        with job.active():
            raise KeyboardInterrupt
    [run] = all_runs(cfg)
    assert run.info.run_id == job.run_id and run.info.status == "KILLED"
    import mlflow
    assert mlflow.active_run() is None


def test_exception_in_jobrun_ends_failed(cfg):
    job = tracking.JobRun(cfg)
    with pytest.raises(ValueError):
        with job.active():
            raise ValueError("bad")
    [run] = all_runs(cfg)
    assert run.info.status == "FAILED" and run.data.tags["error"] == "ValueError: bad"


def test_tracking_disabled_writes_nothing(compose, fake, tmp_path):
    cfg = compose(["model=bcm", "backend=cpu", "progress=false", "tracking=off", f"tracking.dir={tmp_path / 's'}"])
    rep = runner.run(cfg, tmp_path, echo=False)
    assert rep.metrics["summary/objective"] == 1.0
    assert not (tmp_path / "s").exists()


def _sweep_config(cfg):
    return OmegaConf.create({"tracking": OmegaConf.to_container(cfg.tracking, resolve=True),
                             "model": {"name": "bcm"},
                             "hydra": {"overrides": {"task": ["block_size=16,32"]}}})


def test_sweep_callback_parent_and_interrupt(cfg, capsys):
    """The parent run exists before any job; a child points at it; an interrupted sweep ends KILLED."""
    import os
    cb = tracking.SweepCallback()
    cb.on_multirun_start(_sweep_config(cfg))
    parent = os.environ[tracking.PARENT_ENV]
    assert client_for(cfg).get_run(parent).info.status == "RUNNING"
    job = tracking.JobRun(cfg)
    with job.active():
        pass
    tracking.end_sweep("KILLED")
    c = client_for(cfg)
    assert c.get_run(parent).info.status == "KILLED"
    assert c.get_run(job.run_id).data.tags["mlflow.parentRunId"] == parent
    assert tracking.PARENT_ENV not in os.environ
    assert "sweep summary" in capsys.readouterr().err
    tracking.end_sweep("FAILED")                                # nothing open: a no-op
    assert c.get_run(parent).info.status == "KILLED"


def test_sweep_callback_end_status_from_children(cfg):
    cb = tracking.SweepCallback()
    cb.on_multirun_start(_sweep_config(cfg))
    parent = cb.parent
    for fail in (False, True):
        job = tracking.JobRun(cfg)
        with pytest.raises(RuntimeError) if fail else _null():
            with job.active():
                if fail:
                    raise RuntimeError("x")
    cb.on_multirun_end(_sweep_config(cfg))
    assert client_for(cfg).get_run(parent).info.status == "FAILED"


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_report_metrics_one_case_and_several():
    rows = [{"case": "A k=8", "layer": "A", "k": 8, "variant": "v", "kind": "ours", "median_ms": 1.0, "ok": True,
             "early": False, "x_vs_b": 2.0, "note": "text"},
            {"case": "A k=8", "layer": "A", "k": 8, "variant": "b", "kind": "baseline", "median_ms": 2.0}]
    m = tracking.report_metrics(Report(rows=rows, metrics={"best_ms": 1.0, "flag": True}))
    assert m == {"best_ms": 1.0, "v/median_ms": 1.0, "v/x_vs_b": 2.0, "b/median_ms": 2.0}
    assert tracking.case_params(Report(rows=rows)) == {"case": "A k=8", "case.layer": "A", "case.k": "8"}
    several = rows + [dict(rows[0], case="A k=16", k=16, median_ms=3.0)]
    m = tracking.report_metrics(Report(rows=several))
    assert m["A k_8/v/median_ms"] == 1.0 and m["A k_16/v/median_ms"] == 3.0 and "v/median_ms" not in m
    assert tracking.case_params(Report(rows=several)) == {}
    # several cases without a case column: named by their case columns
    nets = [{"network": n, "N": 1024, "variant": "pull", "kind": "ours", "x_vs_bf": x} for n, x in (("a", 2.0), ("b", 3.0))]
    m = tracking.report_metrics(Report(rows=nets))
    assert m == {"network_a N_1024/pull/x_vs_bf": 2.0, "network_b N_1024/pull/x_vs_bf": 3.0}
    # rows with no case column (one row per variant): the variant's name alone
    m = tracking.report_metrics(Report(rows=[{"variant": "flow", "kind": "ours", "epoch_ms": 1.5, "val_auc": 0.7}]))
    assert m == {"flow/epoch_ms": 1.5, "flow/val_auc": 0.7}


def test_sweep_children_share_metric_names(compose, store, tmp_path, capsys):
    """model=bcm swept over block_size=16,32: both children log the same metric names (the block
    size is in params), so the MLflow UI compares them on one column."""
    import os
    base = ["model=bcm", "backend=cpu", "progress=false", f"tracking.dir={store}", "bench.warmup=0",
            "bench.min_repeats=2", "bench.max_repeats=3", "bench.min_time_ms=0"]
    cb = tracking.SweepCallback()
    cb.on_multirun_start(_sweep_config(compose(base)))
    parent = os.environ[tracking.PARENT_ENV]
    for k in (16, 32):
        runner.run(compose(base + [f"block_size={k}"]), tmp_path / str(k), echo=False)
    cb.on_multirun_end(_sweep_config(compose(base)))
    c = client_for(compose(base))
    children = [r for r in all_runs(compose(base)) if r.data.tags.get("mlflow.parentRunId") == parent]
    assert len(children) == 2
    names = [set(r.data.metrics) for r in children]
    assert names[0] == names[1]
    assert {"best_ms", "x_vs_cpu_dense", "cpu_fft/median_ms", "cpu_dense/median_ms", "cpu_fft/x_vs_cpu_dense"} <= names[0]
    assert not any("k_16" in n or "k_32" in n for n in names[0])
    assert sorted(r.data.params["case.k"] for r in children) == ["16", "32"]
    # the sweep summary shows the shared headline on one column
    summary = capsys.readouterr().err
    header = summary[summary.index("sweep summary"):].splitlines()[1].split()
    assert "best_ms" in header and "x_vs_cpu_dense" in header
    assert c.get_run(parent).info.status == "FINISHED"


def test_unstable_ratio_tags_the_run(cfg, tmp_path):
    rows = [{"case": "A k=8", "variant": "v", "kind": "ours", "median_ms": 1.0, "x_vs_b": 2.0, "ratio_spread": 0.4,
             "ratio_unstable": "yes"},
            {"case": "A k=8", "variant": "b", "kind": "baseline", "median_ms": 2.0}]
    job = tracking.JobRun(cfg)
    with job.active():
        job.log_report(Report(rows=rows), tmp_path)
    [run] = all_runs(cfg)
    assert run.data.tags["ratio_unstable"] == "true" and run.data.tags["ratio_unstable.rows"] == "A k=8/v"
    assert run.data.metrics["v/ratio_spread"] == 0.4


def test_device_tags_name_the_gpus_size():
    from types import SimpleNamespace
    assert runner.device_tags(None) == {"gpu": "none"}
    dev = SimpleNamespace(name="NVIDIA H200", sm_count=132, l2_bytes=60 * 2 ** 20)
    assert runner.device_tags(dev) == {"gpu": "NVIDIA H200", "gpu_sms": 132, "gpu_l2_mib": 60.0}
    assert runner.device_tags(SimpleNamespace(name="x", sm_count=114, l2_bytes=50_000_000))["gpu_l2_mib"] == 47.7


def test_flatten_and_metric_key():
    assert tracking.flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x"}) == {"a.b": 1, "a.c": [1, 2], "d": "x"}
    assert tracking.metric_key("A k=64", "fused", "median_ms") == "A k_64/fused/median_ms"
    assert tracking.metric_key(None, "v") == "v"


@pytest.mark.slow
def test_independent_processes_create_a_fresh_store_once(tmp_path):
    """16 `python -m pipeline` processes started at the same moment against a store that does not
    exist yet (two terminals, a shell loop, a cluster array): the first creates and migrates it under
    the store's file lock, the others wait; every run finishes and the store stays usable."""
    import os
    import subprocess
    import sys
    from mlflow.tracking import MlflowClient
    store = tmp_path / "fresh"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop(tracking.PARENT_ENV, None)
    cmd = [sys.executable, "-m", "pipeline", "model=fewhot", "backend=cpu", "progress=false",
           f"tracking.dir={store}", "bench.warmup=0", "bench.min_repeats=2", "bench.min_time_ms=1",
           f"hydra.run.dir={tmp_path}/runs/${{now:%H%M%S%f}}"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(16)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-2000:]
        assert "Traceback" not in out, out[-2000:]
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 16
    # and the store still takes a run afterwards (experiment_id uses the process's tracking URI,
    # which an earlier test may have pointed at its own store)
    import mlflow
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    exp = tracking.experiment_id("after", OmegaConf.create({"dir": str(store)}))
    assert client.create_run(exp).info.status == "RUNNING"


def test_store_lock_timeout_is_one_line(tmp_path, monkeypatch):
    from filelock import FileLock
    from pipeline.errors import PipelineError
    monkeypatch.setattr(tracking, "LOCK_TIMEOUT_S", 0.2)
    tcfg = OmegaConf.create({"dir": str(tmp_path)})
    with FileLock(str(tmp_path / "mlflow.db.lock")):
        # filelock is reentrant within a thread: hold it from another thread
        import threading
        err = []

        def other():
            try:
                tracking.setup(tcfg)
            except PipelineError as e:
                err.append(str(e))
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert err and "locked by another process" in err[0] and "\n" not in err[0]
