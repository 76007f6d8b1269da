"""Sweeps past one process: parallel jobs (joblib, submitit's local executor), the GPU pool, a shared
MLflow tracking server, and what happens to runs whose job dies or whose sweep is interrupted."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from pipeline import tracking

ROOT = Path(__file__).resolve().parents[1]
FAST = ["model=fewhot", "backend=cpu", "progress=false", "bench.warmup=0", "bench.min_repeats=2",
        "bench.min_time_ms=1"]


def _env():
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    # the interpreter's own bin first, so `mlflow` (scripts/mlflow_server.sh) is this environment's
    # even when the tests run as <venv>/bin/python without the venv activated
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.pop(tracking.PARENT_ENV, None)
    env.pop(tracking.EXPERIMENT_ENV, None)
    return env


def run_cli(args, tmp_path, timeout=900):
    cmd = [sys.executable, "-m", "pipeline", *args, f"hydra.sweep.dir={tmp_path}/multirun",
           f"hydra.run.dir={tmp_path}/run"]
    return subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)


def runs_in(store: Path):
    """The runs of the store, opened as the pipeline opens it (under its lock: a sweep may be creating it)."""
    from mlflow.tracking import MlflowClient
    from pipeline.tracking import ready_store
    client = MlflowClient(ready_store(store))
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def _children_and_parent(runs):
    parents = [r for r in runs if r.data.tags.get("sweep") == "true"]
    assert len(parents) == 1
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return parents[0], kids


# --------------------------------------------------------------------------- launchers, CPU backend

@pytest.mark.slow
@pytest.mark.parametrize("jobs", [4, pytest.param(16, marks=pytest.mark.slow)])
def test_joblib_jobs_into_a_fresh_store(tmp_path, jobs):
    store = tmp_path / "store"
    seeds = ",".join(str(i) for i in range(jobs))
    r = run_cli(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=4", *FAST, f"tracking.dir={store}",
             f"seed={seeds}"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    parent, kids = _children_and_parent(runs_in(store))
    assert len(kids) == jobs
    assert {k.info.status for k in kids} == {"FINISHED"}
    assert parent.info.status == "FINISHED"
    assert "sweep summary" in r.stderr


@pytest.mark.slow
def test_submitit_local_runs_the_same_sweep(tmp_path):
    store = tmp_path / "store"
    r = run_cli(["-m", "hydra/launcher=submitit_local", *FAST, f"tracking.dir={store}", "seed=1,2"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    parent, kids = _children_and_parent(runs_in(store))
    assert len(kids) == 2 and {k.info.status for k in kids} == {"FINISHED"}
    assert parent.info.status == "FINISHED"


def test_slurm_launcher_config_asks_one_gpu_per_job():
    from hydra import compose, initialize_config_dir
    from pipeline.models import register_all
    register_all()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        hc = compose(config_name="config", return_hydra_config=True,
                     overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.account=proj"])
    ln = hc.hydra.launcher
    assert ln.gpus_per_node == 1 and ln.tasks_per_node == 1 and ln.nodes == 1
    assert ln.partition == "gpu" and ln.account == "proj" and ln.timeout_min > 0
    assert "SlurmLauncher" in ln._target_


@pytest.mark.slow
def test_optuna_sweeper_minimises_the_benchmark_median(tmp_path):
    store = tmp_path / "store"
    r = run_cli(["-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=3", "hydra.sweeper.direction=minimize",
             "model=softmax_topn", "model.block_size=choice(64,128,256)", "backend=cpu", "progress=false",
             "bench.warmup=0", "bench.min_repeats=2", "bench.min_time_ms=1", f"tracking.dir={store}"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    _, kids = _children_and_parent(runs_in(store))
    assert len(kids) == 3 and all("summary/objective" in k.data.metrics for k in kids)
    import yaml
    best = yaml.safe_load((tmp_path / "multirun" / "optimization_results.yaml").read_text())
    assert best["best_value"] == pytest.approx(min(k.data.metrics["summary/objective"] for k in kids))


# --------------------------------------------------------------------------- the GPU pool

POOL_SCRIPT = textwrap.dedent("""
    import os, sys, time
    from omegaconf import OmegaConf
    from pipeline.gpu import pool
    cfg = OmegaConf.create({"backend": "cuda", "launcher": {"gpus_per_job": int(sys.argv[2])},
                            "pool": {"enabled": "true", "gpus": ["0", "1"], "share": False,
                                     "dir": sys.argv[1], "wait_s": float(sys.argv[3])}})
    with pool.claim(cfg, poll_s=0.05) as c:
        print("GOT", ",".join(c.gpus), os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
        time.sleep(float(sys.argv[4]))
    print("DONE", flush=True)
""")


def _claimer(tmp_path, per_job=1, wait_s=0.0, hold_s=0.0):
    return subprocess.Popen([sys.executable, "-c", POOL_SCRIPT, str(tmp_path / "locks"), str(per_job),
                             str(wait_s), str(hold_s)], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _first_line(p, timeout=60):
    t0 = time.time()
    line = p.stdout.readline()
    assert time.time() - t0 < timeout
    return line.strip()


def test_pool_gives_each_job_its_own_gpu_and_a_dead_job_gives_it_back(tmp_path):
    a = _claimer(tmp_path, hold_s=60)
    b = _claimer(tmp_path, hold_s=60)
    got_a, got_b = _first_line(a), _first_line(b)
    assert got_a.startswith("GOT") and got_b.startswith("GOT")
    assert {got_a.split()[1], got_b.split()[1]} == {"0", "1"}          # never the same GPU
    assert got_a.split()[1] == got_a.split()[2]                      # CUDA_VISIBLE_DEVICES = the GPU
    c = _claimer(tmp_path, wait_s=0.5)                               # none free: gives up, one line
    _, err = c.communicate(timeout=60)
    assert c.returncode != 0 and "no free GPU in the pool" in err
    a.send_signal(signal.SIGKILL)                                    # a crashed job ...
    a.wait(timeout=30)
    d = _claimer(tmp_path, wait_s=30)                                # ... does not leak its GPU
    assert _first_line(d).split()[1] == got_a.split()[1]
    for p in (b, d):
        p.kill()
        p.wait(timeout=30)


def test_pool_rejects_more_gpus_per_job_than_it_has(tmp_path):
    p = _claimer(tmp_path, per_job=3)
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0 and "launcher.gpus_per_job=3" in err


def test_pool_share_and_cpu_backend(monkeypatch, tmp_path):
    from omegaconf import OmegaConf
    from pipeline.gpu import pool
    monkeypatch.setattr(pool, "_bound", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    base = {"launcher": {"gpus_per_job": 1},
            "pool": {"enabled": "true", "gpus": ["3", "5"], "share": True, "dir": str(tmp_path), "wait_s": 0}}
    with pool.claim(OmegaConf.create({"backend": "cpu", **base})) as c:
        assert not c.active and "CUDA_VISIBLE_DEVICES" not in os.environ
    with pool.claim(OmegaConf.create({"backend": "cuda", **base})) as c:
        assert c.active and c.shared and c.gpus[0] in ("3", "5")
        assert c.tags()["pool.shared"] == "true"
        assert os.environ["CUDA_VISIBLE_DEVICES"] == c.gpus[0]
    monkeypatch.setattr(pool, "_bound", None)


# --------------------------------------------------------------------------- a tracking server

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    env = {**_env(), "MLFLOW_ARTIFACTS_DESTINATION": str(tmp_path / "server-artifacts"), "MLFLOW_WORKERS": "1"}
    p = subprocess.Popen(["bash", str(ROOT / "scripts" / "mlflow_server.sh"), f"sqlite:///{tmp_path / 'server.db'}",
                          str(port)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    t0 = time.time()
    while True:
        try:
            tracking.check_server(uri, timeout_s=2)
            break
        except Exception:
            if p.poll() is not None or time.time() - t0 > 120:
                exited = p.poll() is not None
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:      # the server's group is already gone
                    pass
                pytest.fail("mlflow server did not start: " + (p.stderr.read()[-3000:] if exited else "timeout"))
            time.sleep(0.5)
    yield uri
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)


def _rest(uri, path, body):
    req = urllib.request.Request(f"{uri}/api/2.0/mlflow/{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


@pytest.mark.slow
def test_sweep_logs_to_a_tracking_server(server, tmp_path):
    r = run_cli(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=4", *FAST, "tracking=server",
             f"tracking.uri={server}", "seed=" + ",".join(str(i) for i in range(16))], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    exps = _rest(server, "experiments/search", {"max_results": 100})["experiments"]
    ids = [e["experiment_id"] for e in exps]
    runs = _rest(server, "runs/search", {"experiment_ids": ids, "max_results": 100})["runs"]
    tags = [{t["key"]: t["value"] for t in run["data"].get("tags", [])} for run in runs]
    parent = [run for run, t in zip(runs, tags) if t.get("sweep") == "true"]
    assert len(parent) == 1 and parent[0]["info"]["status"] == "FINISHED"
    kids = [run for run, t in zip(runs, tags) if t.get("mlflow.parentRunId") == parent[0]["info"]["run_id"]]
    assert len(kids) == 16 and {k["info"]["status"] for k in kids} == {"FINISHED"}
    # artifacts went through the server (proxied) into its artifact store
    assert any((tmp_path / "server-artifacts").rglob("results.csv"))


@pytest.mark.slow
def test_unreachable_server_fails_fast_before_any_job(tmp_path):
    port = _free_port()
    t0 = time.time()
    r = run_cli(["-m", *FAST, "tracking=server", f"tracking.uri=http://127.0.0.1:{port}", "seed=1,2"], tmp_path)
    assert r.returncode != 0
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: tracking server http://127.0.0.1:") and "does not answer" in line
    assert time.time() - t0 < 60
    assert not (tmp_path / "multirun" / "0").exists()          # no job started


def test_an_invalid_job_stops_the_sweep_before_any_job_runs(tmp_path):
    """Every job is composed and checked first: the valid block_size=16 job is not run (nor logged)
    before block_size=48 is refused."""
    store = tmp_path / "store"
    r = run_cli(["-m", "model=bcm", "backend=cpu", "progress=false", f"tracking.dir={store}", "block_size=16,48"],
                tmp_path)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: job 1 of the sweep (") and "block_size=48 is not allowed" in line
    assert not (tmp_path / "multirun" / "0").exists()
    assert not (store / "mlflow.db").exists()


# --------------------------------------------------------------------------- dead and interrupted jobs

@pytest.mark.slow
def test_sweep_end_marks_runs_of_dead_jobs(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from omegaconf import OmegaConf
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    tcfg = OmegaConf.create({"enabled": True, "dir": str(tmp_path), "uri": "", "experiment": "t", "run_name": ""})
    cfg = OmegaConf.create({"tracking": tcfg, "model": {"name": "t"}, "hydra": {"overrides": {"task": []}}})
    for status, expect in ((None, "FAILED"), ("KILLED", "KILLED")):
        cb = tracking.SweepCallback()
        cb.on_multirun_start(cfg)
        client = MlflowClient()
        exp = client.get_run(cb.parent).info.experiment_id
        done = client.create_run(exp, tags={"mlflow.parentRunId": cb.parent})
        client.set_terminated(done.info.run_id, "FINISHED")
        dead = client.create_run(exp, tags={"mlflow.parentRunId": cb.parent})   # its process was SIGKILLed
        parent = cb.parent
        cb.finish(status)
        assert client.get_run(dead.info.run_id).info.status == expect
        assert "ended before its run" in client.get_run(dead.info.run_id).data.tags["error"]
        assert client.get_run(done.info.run_id).info.status == "FINISHED"
        assert client.get_run(parent).info.status == expect


def _sweep_process(cmd, tmp_path: Path) -> subprocess.Popen:
    """The sweep, its output into files (a pipe nobody reads while it runs would stall it once full)."""
    with (tmp_path / "sweep.out").open("w") as out, (tmp_path / "sweep.err").open("w") as err:
        p = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=out, stderr=err, text=True)
    p.err_path = tmp_path / "sweep.err"
    return p


def _sweep_stderr(sweep: subprocess.Popen, timeout: int) -> str:
    sweep.wait(timeout=timeout)
    return sweep.err_path.read_text()


def _kill_a_job_mid_run(store: Path, running_jobs: int, job_pids, sweep=None) -> None:
    """Wait until ``running_jobs`` runs of the sweep are RUNNING in the store and ``job_pids()``
    finds a job's process, then SIGKILL that process. ``sweep`` (its Popen): when it ends first, the
    failure shows its exit code and stderr."""
    t0 = time.time()
    while time.time() - t0 < 300:
        time.sleep(1)
        if sweep is not None and sweep.poll() is not None:
            pytest.fail(f"the sweep ended (exit {sweep.returncode}) before a job could be killed: "
                        + sweep.err_path.read_text()[-2000:])
        if not (store / "mlflow.db").exists():
            continue
        try:
            running = [r for r in runs_in(store) if r.info.status == "RUNNING" and r.data.tags.get("sweep") != "true"]
        except Exception:
            continue
        pids = job_pids() if len(running) >= running_jobs else []
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            return
    pytest.fail(f"no job started within 300 s ({len(list(store.glob('*')))} entries in the store)")


@pytest.mark.slow
def test_a_killed_job_is_marked_and_the_others_finish(tmp_path):
    """submitit's local executor runs each job in its own process: SIGKILL one mid-run; the other
    jobs finish, the dead job's run ends FAILED (not RUNNING), the sweep says so in one line."""
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "pipeline", "-m", "hydra/launcher=submitit_local", "model=bcm_cnn",
           "dataset=digits", "backend=cpu", "progress=false", "epochs=30", f"tracking.dir={store}",
           "seed=1,2,3", f"hydra.sweep.dir={tmp_path}/multirun"]
    sweep = _sweep_process(cmd, tmp_path)
    _kill_a_job_mid_run(store, 1, lambda: [int(p) for p in subprocess.run(
        ["pgrep", "-f", "submitit.core._submit"], capture_output=True, text=True).stdout.split()], sweep)
    err = _sweep_stderr(sweep, 900)
    assert sweep.returncode != 0
    assert err.strip().splitlines()[-1].startswith("error: a job of the sweep died")
    parent, kids = _children_and_parent(runs_in(store))
    statuses = sorted(k.info.status for k in kids)
    assert "RUNNING" not in statuses and statuses.count("FINISHED") == 2, (statuses, err[-3000:])
    assert parent.info.status == "FAILED"


@pytest.mark.parametrize("launcher,target", [("submitit_local", "WaitingLocalLauncher"),
                                             ("slurm", "WaitingSlurmLauncher")])
def test_submitit_launchers_let_every_job_end_before_reading_results(launcher, target):
    """Hydra's submitit launcher raises at the first dead job while later ones still run (their runs
    would be marked FAILED, then finish): the project's configs of the same names select launchers
    that wait for every job; the plugin's other knobs stay."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra import compose, initialize_config_dir
    from pipeline.models import register_all
    register_all()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        hc = compose(config_name="config", return_hydra_config=True, overrides=[f"hydra/launcher={launcher}"])
    assert hc.hydra.launcher._target_ == f"hydra_plugins.pipeline_launchers.waiting_submitit.{target}"
    assert hc.hydra.launcher.timeout_min == 60 and hc.hydra.launcher.tasks_per_node == 1


def test_the_waiting_executor_waits_for_every_job_before_returning(monkeypatch):
    """The launcher's executor returns its jobs only after each has ended (in any order)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    import submitit
    from hydra_plugins.pipeline_launchers import waiting_submitit
    waited = []

    class FakeJob:
        def __init__(self, i):
            self.i = i

        def wait(self):
            waited.append(self.i)

    class FakeExecutor:
        def __init__(self, *a, **k):
            pass

        def map_array(self, fn, *iterables):
            return [FakeJob(i) for i in range(len(iterables[0]))]
    monkeypatch.setattr(submitit, "AutoExecutor", FakeExecutor)

    def launch(job_overrides, initial_job_idx):
        jobs = submitit.AutoExecutor("folder").map_array(None, job_overrides)
        assert waited == [0, 1, 2]          # every job ended before a result is read
        return [j.i for j in jobs]
    assert waiting_submitit._launch_and_wait(launch, [["a"], ["b"], ["c"]], 0) == [0, 1, 2]
    assert submitit.AutoExecutor is FakeExecutor   # restored after the launch


def _joblib_job_processes():
    """Processes that run a job of the joblib launcher: children of a loky worker (a fork of it)."""
    def cmd(pid):
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return ""

    def ppid(pid):
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return 0
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    return [p for p in pids if "loky" in cmd(p) and "loky" in cmd(ppid(p))]


@pytest.mark.slow
def test_joblib_a_killed_job_fails_alone(tmp_path):
    """hydra/launcher=joblib runs each job in a child of its worker: SIGKILL one job mid-run; the
    other jobs finish (no TerminatedWorkerError), its run ends FAILED, the sweep says so in one line."""
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "pipeline", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=3",
           "model=bcm_cnn", "dataset=digits", "backend=cpu", "progress=false", "epochs=30",
           f"tracking.dir={store}", "seed=1,2,3", f"hydra.sweep.dir={tmp_path}/multirun"]
    sweep = _sweep_process(cmd, tmp_path)
    _kill_a_job_mid_run(store, 3, _joblib_job_processes, sweep)
    err = _sweep_stderr(sweep, 900)
    assert sweep.returncode != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: a job of the sweep died (JobDiedError: job #") and "SIGKILL" in last, last
    parent, kids = _children_and_parent(runs_in(store))
    statuses = sorted(k.info.status for k in kids)
    assert "RUNNING" not in statuses and statuses.count("FINISHED") == 2 and statuses.count("FAILED") == 1, (statuses, err[-3000:])
    assert parent.info.status == "FAILED"
    assert "TerminatedWorkerError" not in err
