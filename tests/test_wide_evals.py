"""model.evals_per_epoch of the wide models: an epoch trained as p slices of its chunk order (cut
between mini-batches) trains exactly what one pass trains, time to quality is read at every
evaluation (fractional epochs), and every per-epoch number stays per epoch."""
from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest

from pipeline.errors import ConfigError
from pipeline.models.wide import reference as ref
from pipeline.train import History, time_to_target


@pytest.mark.parametrize("n,step,parts", [(578, 32, 4), (578, 1, 4), (100, 8, 13), (64, 32, 2), (7, 3, 3)])
def test_epoch_slices_cover_the_order_between_steps(n, step, parts):
    order = np.random.default_rng(n).permutation(n).astype(np.int32)
    pieces = [ref.epoch_slice(order, j, parts, step) for j in range(parts)]
    assert np.array_equal(np.concatenate(pieces), order)
    cuts = np.cumsum([len(p) for p in pieces])[:-1]
    assert all(c % step == 0 for c in cuts)                       # no mini-batch is split
    steps = [-(-len(p) // step) for p in pieces]
    assert max(steps) - min(steps) <= 1 and all(s >= 1 for s in steps)


def test_time_to_target_at_parts():
    h = History("flow", "ours")
    pts = [(0.60, 3.0, 1.0), (0.57, 3.0, 1.5), (0.54, 2.0, 1.0), (0.53, 2.0, 1.0),      # epoch 1
           (0.52, 3.0, 1.0), (0.50, 3.0, 1.0), (0.51, 3.0, 1.0), (0.49, 3.0, 1.0)]      # epoch 2
    for i, (vl, ms, gms) in enumerate(pts):
        h.parts.append({"epoch": (i + 1) / 4, "val_loss": vl, "epoch_ms": ms, "gpu_ms": gms})
    h.records = [{"epoch": 1, "val_loss": 0.53, "epoch_ms": 10.0, "gpu_ms": 4.5},
                 {"epoch": 2, "val_loss": 0.49, "epoch_ms": 12.0, "gpu_ms": 4.0}]
    assert h.evals is h.parts and h.epochs == 2
    assert time_to_target(h, 0.55, "val_loss", ("epoch_ms", "gpu_ms")) == {"epochs": 0.75, "epoch_ms": 8.0,
                                                                          "gpu_ms": 3.5}
    assert time_to_target(h, 0.50, clocks=("gpu_ms",)) == {"epochs": 1.5, "gpu_ms": 6.5}
    assert time_to_target(h, 0.7)["epochs"] == 0.25
    assert math.isnan(time_to_target(h, 0.4)["epochs"])
    h.parts = []                                                  # once an epoch: the epochs' records
    assert time_to_target(h, 0.55, "val_loss", ("epoch_ms", "gpu_ms")) == {"epochs": 1.0, "epoch_ms": 10.0,
                                                                          "gpu_ms": 4.5}


def _model(compose, tmp_path, *overrides):
    from pipeline.context import make_context
    from pipeline.models.wide.model import WideModel
    cfg = compose(["model=wide_lr", "dataset=ctr_synth", "backend=cpu", "size=small", "progress=false", "epochs=2",
                   f"cache_dir={tmp_path}", *overrides])
    m = WideModel(cfg, make_context(cfg, tmp_path))
    m.prepare()
    return m


@pytest.mark.parametrize("update,optimizer,k", [("chunk", "sgd", 0), ("batch", "sgd", 0), ("chunk", "adagrad", 0),
                                                ("batch", "sgd", 3)])
def test_cpu_four_parts_train_exactly_one_pass(compose, tmp_path, update, optimizer, k):
    """cpu through the harness, 2 shuffled epochs: p = 4 ends with bit-identical parameters and
    validation losses to p = 1; the epoch records are the same epochs (times: sums of the parts)."""
    from pipeline.models.wide.model import CpuTrainer, WideTrainer
    from pipeline.train import fit
    m = _model(compose, tmp_path, f"model.k={k}", f"model.update={update}")
    data, mc = m.data, m.cfg.model
    assert -(-data.n_chunks // m.step) % 4                        # the last slice is shorter

    def run(parts):
        inner = CpuTrainer(data, mc, update, optimizer)
        inner.set_params(ref.init_params(data.d, k, float(mc.init_std), 0))
        tr = WideTrainer("cpu", "ours", inner, data, 0, True, m.step)
        return inner.params(), fit(m.ctx, [tr], 2, watch=("val_loss",), parts=parts)["cpu"]
    p1, h1 = run(1)
    p4, h4 = run(4)
    assert np.array_equal(p1.w, p4.w) and p1.b == p4.b and (k == 0 or np.array_equal(p1.V, p4.V))
    assert h1.series("val_loss") == h4.series("val_loss") and h1.series("val_auc") == h4.series("val_auc")
    assert h4.series("train_loss") == pytest.approx(h1.series("train_loss"), rel=1e-12)
    assert h1.epochs == h4.epochs == 2 and not h1.parts and len(h4.parts) == 8
    assert [r["epoch"] for r in h4.parts] == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]
    assert [r["val_loss"] for r in h4.parts[3::4]] == h4.series("val_loss")      # an epoch's is its last part's
    for e in range(2):
        part = h4.parts[4 * e:4 * e + 4]
        assert h4.records[e]["epoch_ms"] == pytest.approx(sum(r["epoch_ms"] for r in part))
        assert h4.records[e]["gpu_ms"] == pytest.approx(sum(r["gpu_ms"] for r in part))
        assert h4.records[e]["eval_ms"] == pytest.approx(sum(r["eval_ms"] for r in part))
    assert h4.parts[-1]["time_s"] == pytest.approx(h4.last("time_s"))
    assert set(h4.keys()) == set(h1.keys())


def test_stage_captures_one_graph_per_slice_length(monkeypatch):
    """StageTrainer replays the graph captured for the order's length (a slice's chunks first in the
    device copy of the order): lengths 5, 5, 4 capture two graphs, and each replay reads its slice."""
    from pipeline.models.wide import gpu

    class Arr(np.ndarray):
        def get(self):
            return np.array(self)
    cp = types.SimpleNamespace(asarray=lambda a: np.asarray(a))
    captured, ran = [], []
    graphs = types.ModuleType("pipeline.gpu.graphs")

    def try_capture(fn, notice, name):
        captured.append(name)
        return fn, True
    graphs.try_capture = try_capture
    monkeypatch.setitem(sys.modules, "pipeline.gpu.graphs", graphs)

    class Ev:
        def record(self):
            pass

        def synchronize(self):
            pass

        def time_since(self, other):
            return 1.0
    tr = object.__new__(gpu.StageTrainer)
    tr.cp, tr.ctx, tr.data = cp, types.SimpleNamespace(notice=print), types.SimpleNamespace(n=100)
    tr.order_dev = np.zeros(14, np.int32)
    tr.loss = np.zeros(1, np.float64).view(Arr)
    tr.replays = {}
    tr._events = lambda: (Ev(), Ev())
    tr._steps = lambda n_order: ran.append(tr.order_dev[:n_order].copy())
    order = np.arange(14, dtype=np.int32)[::-1]
    for a, b in ((0, 5), (5, 10), (10, 14)):
        tr.epoch(order[a:b])
    assert len(captured) == 2 and sorted(tr.replays) == [4, 5]
    assert [list(r) for r in ran] == [list(order[0:5]), list(order[5:10]), list(order[10:14])]


@pytest.mark.slow
def test_cli_four_evaluations_an_epoch(cli, tmp_path):
    """The CPU CLI with model.evals_per_epoch=4: to_target_epochs in quarters, the per-epoch columns,
    epochs and MLflow per-epoch series as with one evaluation an epoch."""
    from mlflow.tracking import MlflowClient

    def run(p):
        r = cli("model=wide_lr", "dataset=ctr_synth", "size=small", "backend=cpu", f"model.evals_per_epoch={p}",
                "epochs=2", check=True, timeout=300)
        lines = r.stdout.splitlines()
        head = next(i for i, ln in enumerate(lines) if ln.startswith("variant "))
        cols, row = lines[head].split(), lines[head + 2].split()
        assert len(cols) == len(row) and row[0] == "cpu"
        return dict(zip(cols, row)), r.stdout
    t1, _ = run(1)
    t4, out4 = run(4)
    assert list(t1) == list(t4)
    for c in ("epochs", "early_stop", "train_loss", "val_loss", "val_auc"):
        assert t1[c] == t4[c], c
    q = float(t4["to_target_epochs"]) * 4
    assert abs(q - round(q)) < 1e-9 and 1 <= round(q) <= 8
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=10)
    assert len(runs) == 2
    for r in runs:
        assert len(client.get_metric_history(r.info.run_id, "val_loss")) == 2
        assert r.data.metrics["summary/cpu/to_target_epochs"] in ([float(t1["to_target_epochs"])] +
                                                                 [float(t4["to_target_epochs"])])


@pytest.mark.parametrize("value", ["0", "-2"])
def test_config_rejects_non_positive(compose, value):
    from pipeline.config import validate
    with pytest.raises(ConfigError, match=f"model.evals_per_epoch={value} is not allowed"):
        validate(compose(["model=wide_fm", f"model.evals_per_epoch={value}"]))


@pytest.mark.parametrize("value", ["1.5", "abc", "true"])
def test_config_rejects_non_integers(compose, value):
    from pipeline.config import validate
    try:
        cfg = compose(["model=wide_lr", f"model.evals_per_epoch={value}"])
    except Exception as e:                                       # the schema's type check (Hydra)
        assert "evals_per_epoch" in str(e)
        return
    with pytest.raises(ConfigError, match="model.evals_per_epoch"):
        validate(cfg)


def test_more_evaluations_than_mini_batches_is_a_config_error(compose, tmp_path):
    with pytest.raises(ConfigError, match=r"model.evals_per_epoch=500 is not allowed: at most the 19 mini-batches"):
        _model(compose, tmp_path, "model.evals_per_epoch=500")


@pytest.mark.parametrize("design", ["chunk", "warp"])
def test_out_of_core_flow_rejects_several_evaluations(compose, tmp_path, design):
    """Out-of-core flow streams pieces in its own order, not slices of the chunk order: p > 1 is a
    one-line config error before anything reaches the device (design=warp falls back to it)."""
    m = _model(compose, tmp_path, "model.evals_per_epoch=2", "model.device_budget_mb=0.5", f"model.design={design}")
    m.ours, m.baselines = ["flow"], []
    with pytest.raises(ConfigError) as e:
        m.transfer()
    msg = str(e.value)
    assert msg.startswith("model.evals_per_epoch=2 is not allowed: 1 with out-of-core flow") and "\n" not in msg
    assert "model.device_budget_mb" in msg
