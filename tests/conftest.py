"""Shared test helpers: config composition, the CLI, and the GPU gate."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def gpu_reason():
    from pipeline.gpu.device import why_unavailable
    return why_unavailable()


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            if reason is None:
                reason = gpu_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"needs a GPU: {reason}"))


@pytest.fixture
def compose():
    """compose(overrides) -> the composed DictConfig, as the CLI would see it."""
    from hydra import compose as hcompose, initialize_config_dir
    from pipeline.models import register_all
    register_all()

    def _compose(overrides=()):
        with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
            return hcompose(config_name="config", overrides=list(overrides))
    return _compose


@pytest.fixture
def prepared(compose, tmp_path):
    """prepared(*overrides) -> (model, ctx): the model the overrides compose, checked, its context
    made as a run makes it (make_context: the backend, the size=small preset and their notices in
    ``ctx.notices``) and its ``prepare()`` run; caches under tmp_path."""
    def _prepared(*overrides):
        import importlib
        from pipeline.config import validate
        from pipeline.context import make_context
        cfg = compose([*overrides, "progress=false", f"cache_dir={tmp_path / 'cache'}"])
        validate(cfg)
        ctx = make_context(cfg, tmp_path)
        module, cls = str(cfg.model.impl).split(":")
        model = getattr(importlib.import_module(module), cls)(cfg, ctx)
        model.prepare()
        return model, ctx
    return _prepared


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory):
    """An empty MLflow SQLite store, created once per session (creating one runs MLflow's
    migrations, seconds per store); :func:`mlflow_store` copies it."""
    from mlflow.tracking import MlflowClient
    d = tmp_path_factory.mktemp("mlflow-template")
    MlflowClient(f"sqlite:///{d / 'mlflow.db'}").search_experiments()
    return d / "mlflow.db"


@pytest.fixture
def mlflow_store(tmp_path, mlflow_template):
    """tmp_path holding a ready, empty mlflow.db (use as tracking.dir)."""
    import shutil
    shutil.copy(mlflow_template, tmp_path / "mlflow.db")
    return tmp_path


@pytest.fixture
def cli(tmp_path, mlflow_template):
    """cli(*overrides) -> CompletedProcess of `python -m pipeline ...` with MLflow in tmp_path
    (a copy of an empty store unless ``fresh_store=True``: then the CLI creates it)."""
    def _cli(*overrides, check=False, timeout=600, fresh_store=False):
        import shutil
        if not fresh_store and not (tmp_path / "mlflow.db").exists():
            shutil.copy(mlflow_template, tmp_path / "mlflow.db")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        flags = [o for o in overrides if o.startswith("-")]   # e.g. -m: argparse wants flags first
        cmd = [sys.executable, "-m", "pipeline", *flags, f"tracking.dir={tmp_path}", "progress=false",
               f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/multirun",
               *[o for o in overrides if not o.startswith("-")]]
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r
    return _cli


@pytest.fixture
def gpu_ctx(tmp_path, compose):
    """A Context on the GPU backend (GPU tests only)."""
    from pipeline.context import make_context
    cfg = compose(["backend=cuda", "progress=false", "bench.min_repeats=3", "bench.min_time_ms=1"])
    return make_context(cfg, tmp_path)
