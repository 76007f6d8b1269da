"""Per-epoch values reach MLflow as they come; an interrupted run (Ctrl-C, SIGTERM) keeps what it
measured, says so in a tag, and still ends KILLED."""
from __future__ import annotations

import pytest

from pipeline import runner, tracking
from pipeline.models.base import Model
from pipeline.results import Report


@pytest.fixture(autouse=True)
def _no_sweep_env(monkeypatch):
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    monkeypatch.delenv(tracking.EXPERIMENT_ENV, raising=False)


def _client(store):
    from mlflow.tracking import MlflowClient
    return MlflowClient(f"sqlite:///{store / 'mlflow.db'}")


def _runs(store):
    c = _client(store)
    return c.search_runs([e.experiment_id for e in c.search_experiments()])


class Trainer(Model):
    """Trains ``epochs`` epochs, logging each; raises KeyboardInterrupt after ``stop_after``."""
    epochs = 5
    stop_after = None

    def execute(self):
        self.loss = []
        for e in range(self.epochs):
            if e == self.stop_after:
                raise KeyboardInterrupt
            self.loss.append(1.0 / (e + 1))
            self.ctx.log_epoch({"loss": self.loss[-1], "auc": float("nan")}, e)

    def report(self):
        return Report(rows=[{"variant": "v", "kind": "ours", "final_loss": self.loss[-1]}],
                      series={"loss": list(self.loss)})


@pytest.fixture
def trainer(monkeypatch):
    monkeypatch.setattr(runner, "model_class", lambda impl: Trainer)
    monkeypatch.setattr(Trainer, "stop_after", None)
    return Trainer


def _cfg(compose, store):
    return compose(["model=bcm", "backend=cpu", "progress=false", f"tracking.dir={store}"])


def test_epochs_are_logged_live_and_once(compose, mlflow_store, trainer, tmp_path):
    runner.run(_cfg(compose, mlflow_store), tmp_path / "job", echo=False)
    [run] = _runs(mlflow_store)
    hist = _client(mlflow_store).get_metric_history(run.info.run_id, "loss")
    assert sorted((h.step, h.value) for h in hist) == [(e, 1.0 / (e + 1)) for e in range(5)]   # not twice
    assert "auc" not in run.data.metrics                      # NaN epochs are not logged
    assert run.info.status == "FINISHED" and "interrupted" not in run.data.tags


def test_interrupted_run_keeps_its_epochs_and_says_so(compose, mlflow_store, trainer, tmp_path, capsys):
    trainer.stop_after = 3
    with pytest.raises(KeyboardInterrupt):
        runner.run(_cfg(compose, mlflow_store), tmp_path / "job", echo=False)
    [run] = _runs(mlflow_store)
    assert run.info.status == "KILLED"
    assert run.data.tags["interrupted"] == "true" and run.data.tags["interrupted_stage"] == "execute"
    c = _client(mlflow_store)
    assert [h.step for h in sorted(c.get_metric_history(run.info.run_id, "loss"), key=lambda h: h.step)] == [0, 1, 2]
    assert run.data.metrics["v/final_loss"] == pytest.approx(1 / 3)     # the report of the epochs it finished
    arts = {a.path for a in c.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "results.csv", "notes.txt"} <= arts
    notes = open(c.download_artifacts(run.info.run_id, "notes.txt", str(tmp_path / "dl"))).read()
    assert "interrupted in execute after 3 epoch(s)" in notes
    assert "interrupted in execute after 3 epoch(s)" in capsys.readouterr().err


def test_interrupt_before_any_result_keeps_config_and_tag(compose, mlflow_store, trainer, tmp_path):
    trainer.stop_after = 0          # report() cannot be made: no epoch finished
    with pytest.raises(KeyboardInterrupt):
        runner.run(_cfg(compose, mlflow_store), tmp_path / "job", echo=False)
    [run] = _runs(mlflow_store)
    assert run.info.status == "KILLED" and run.data.tags["interrupted"] == "true"
    assert "config.yaml" in {a.path for a in _client(mlflow_store).list_artifacts(run.info.run_id)}


@pytest.mark.slow
def test_bcm_cnn_stopped_after_three_epochs(compose, mlflow_store, tmp_path, monkeypatch):
    """The issue's case: bcm_cnn stopped after 3 finished epochs keeps them (KILLED, tagged)."""
    from pipeline.models.bcm_cnn import model as cnn
    calls = {"n": 0}
    evaluate = cnn.BcmCnnModel._evaluate

    def stop_in_fourth(self, *a):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return evaluate(self, *a)
    monkeypatch.setattr(cnn.BcmCnnModel, "_evaluate", stop_in_fourth)
    cfg = compose(["model=bcm_cnn", "dataset=digits", "backend=cpu", "progress=false", "block_size=16",
                   "epochs=5", "model.dense_baseline=false", f"tracking.dir={mlflow_store}"])
    with pytest.raises(KeyboardInterrupt):
        runner.run(cfg, tmp_path / "job", echo=False)
    [run] = _runs(mlflow_store)
    assert run.info.status == "KILLED" and run.data.tags["interrupted_stage"] == "execute"
    hist = _client(mlflow_store).get_metric_history(run.info.run_id, "bcm_k16/test_acc")
    assert sorted(h.step for h in hist) == [0, 1, 2] and all(0 <= h.value <= 1 for h in hist)
