"""What a run says can be trusted: every paper experiment (conf/experiment/*.yaml) selects its own
model and runs as typed on a fresh machine (the CPU backend, an empty data_dir), falling back in one
line where its data is missing; model=bcm_cnn ends with the fastest line like every model; and
model=sparse_dnn refuses a knob its CPU run does not use and its table says what its check holds."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
# the benchmark harness measures each variant once (what is checked here is that the experiment runs
# and its results pass their checks, not the precision of its times)
ONCE = ["bench.min_time_ms=0", "bench.min_repeats=1", "bench.max_repeats=1", "bench.warmup=0"]
FALLBACK = re.compile(r"^dataset (\S+) is not in data_dir=(.+): .+ instead \(get it with: python -m "
                      r"pipeline\.data\.fetch (\S+)\)$")


@pytest.fixture
def fresh(tmp_path):
    """Overrides of a fresh machine: the CPU backend, no tracking, an empty data_dir and cache."""
    empty = tmp_path / "empty-data"
    empty.mkdir()
    return empty, ["backend=cpu", "tracking=off", "progress=false", f"data_dir={empty}",
                   f"cache_dir={tmp_path / 'cache'}"]


def _run(compose, tmp_path, capsys, overrides):
    """One job in this process (as ``python -m pipeline`` runs it): (report, stdout, stderr);
    ``overrides`` may also be a composed config."""
    from pipeline import runner
    cfg = compose(overrides) if isinstance(overrides, (list, tuple)) else overrides
    report = runner.run(cfg, tmp_path / "out", echo=True)
    out, err = capsys.readouterr()
    return report, out, err


def _notices(err: str):
    return [ln[len("[pipeline] "):] for ln in err.splitlines() if ln.startswith("[pipeline] ")]


# ------------------------------------------------------------------------ A: the experiments


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_runs_as_typed_on_a_fresh_machine(compose, tmp_path, capsys, fresh, experiment):
    """``experiment=<name>`` alone (no model=) picks its model and finishes on the CPU backend with
    an empty data_dir; where its data is missing (its dataset names a fallback) it says so in
    exactly one line, naming data_dir and the fetch command; elsewhere no such line."""
    empty, env = fresh
    cfg = compose([f"experiment={experiment}", *env, *ONCE])
    text = (ROOT / "conf" / "experiment" / f"{experiment}.yaml").read_text()
    assert f"override /model: {cfg.model.name}" in text, f"{experiment}.yaml does not select its model"
    falls_back = bool(str(cfg.dataset.get("fallback", "") or ""))
    report, out, err = _run(compose, tmp_path, capsys, cfg)
    assert not report.failures and report.rows, err[-2000:]
    assert all(r.get("ok", True) is not False for r in report.rows)
    fell = [m for n in _notices(err) if (m := FALLBACK.match(n))]
    if falls_back:
        assert len(fell) == 1 and fell[0].group(2) == str(empty), err
        assert fell[0].group(1) == fell[0].group(3)              # the missing data and what fetches it
    else:
        assert fell == [], err


def test_only_the_experiment_falls_back_an_explicit_dataset_needs_its_data(compose, tmp_path, capsys, fresh):
    """snig_table3 asks for MNIST inputs with random ones as its stand-in; a RadiX-Net dataset typed
    on the command line has none, so a missing MNIST fails there with the fetch command (as
    dataset=cifar10 does for model=bcm_cnn)."""
    empty, env = fresh
    cfg = compose(["experiment=snig_table3", *env])
    assert cfg.model.name == "sparse_dnn" and cfg.dataset.fallback == "random" and cfg.dataset.inputs == "mnist"
    with pytest.raises(DataError, match=r"python -m pipeline\.data\.fetch mnist"):
        _run(compose, tmp_path, capsys, ["model=sparse_dnn", "dataset=radixnet_1024", *env])


def test_sparse_dnn_fallback_is_only_a_stand_in_for_mnist(compose):
    from pipeline.config import validate
    validate(compose(["model=sparse_dnn", "dataset=radixnet_1024", "dataset.fallback=random"]))
    with pytest.raises(ConfigError, match=r"^dataset\.fallback='digits' is not allowed: .*random"):
        validate(compose(["model=sparse_dnn", "dataset=radixnet_1024", "dataset.fallback=digits"]))


def test_bcm_cnn_small_preset_replaces_model_keys_and_is_checked(compose, tmp_path):
    """model.small (size=small: the CPU backend) replaces the experiment's epochs, says so, and its
    values and keys are checked like the model's, named model.small.<key>."""
    from pipeline.config import validate
    from pipeline.context import make_context
    from pipeline.models.bcm_cnn.model import BcmCnnModel
    cfg = compose(["experiment=bcm_cifar10_accuracy", "backend=cpu", "progress=false", "dataset=digits",
                   f"cache_dir={tmp_path / 'cache'}"])
    validate(cfg)
    assert cfg.model.epochs == 15 and cfg.model.small.epochs == 1
    ctx = make_context(cfg, tmp_path)
    BcmCnnModel(cfg, ctx).prepare()
    assert cfg.model.epochs == 1
    assert "size=small: model epochs=1 (model.small; model.small=null keeps the full settings)" in ctx.notices
    with pytest.raises(ConfigError, match=r"^model\.small\.epochs=0 is not allowed"):
        validate(compose(["experiment=bcm_cifar10_accuracy", "model.small.epochs=0"]))
    with pytest.raises(ConfigError, match=r"^model\.small\.name="):
        validate(compose(["experiment=bcm_cifar10_accuracy", "+model.small.name=x"]))
    cfg = compose(["experiment=bcm_cifar10_accuracy", "size=full", "backend=cpu", "progress=false",
                   "dataset=digits", f"cache_dir={tmp_path / 'cache'}"])
    validate(cfg)
    BcmCnnModel(cfg, make_context(cfg, tmp_path)).prepare()
    assert cfg.model.epochs == 15                                    # size=full: the experiment's own


# ------------------------------------------------------------- B: bcm_cnn's fastest line


def test_bcm_cnn_default_command_prints_the_fastest_line(compose, tmp_path, capsys, fresh):
    """`python -m pipeline model=bcm_cnn`: rows carry kind (the BCM network ours, dense the
    baseline) and the epoch time epoch_ms, so the run ends with the fastest line naming the networks."""
    _, env = fresh
    report, out, _ = _run(compose, tmp_path, capsys, ["model=bcm_cnn", *env])
    assert [(r["variant"], r["kind"]) for r in report.rows] == [("dense", "baseline"), ("bcm_k32", "ours")]
    assert all(r["epoch_ms"] > 0 and r["ok"] is True for r in report.rows)
    lines = [ln for ln in out.splitlines() if "fastest:" in ln]
    assert len(lines) == 1, out
    ours, dense = (next(r for r in report.rows if r["variant"] == v) for v in ("bcm_k32", "dense"))
    x = f"{dense['epoch_ms'] / ours['epoch_ms']:.3g}x dense"
    if ours["epoch_ms"] <= dense["epoch_ms"]:
        assert re.match(r"^fastest: bcm_k32 [\d.]+ m?s( an epoch)?; " + re.escape(x) + "$", lines[0]), lines
    else:                                                          # the NumPy FFT may lose to NumPy's GEMMs
        assert re.match(r"^fastest: dense [\d.]+ m?s( an epoch)? \(a baseline\); ours best: bcm_k32 [\d.]+ m?s; "
                        + re.escape(x) + "$", lines[0]), lines
    assert ours["x_vs_dense"] == pytest.approx(dense["epoch_ms"] / ours["epoch_ms"])


# ------------------------------------------------------------------- C: sparse_dnn's knobs and columns


@pytest.mark.parametrize("typed, named", [("batch_size=4096", "batch_size=4096"),
                                          ("model.batch_size=512", "model.batch_size=512")])
def test_sparse_dnn_refuses_a_batch_size_its_cpu_run_does_not_use(compose, tmp_path, fresh, typed, named):
    """On the CPU backend in one process the reference classifies every image at once: a batch size
    is refused in one line naming the key as typed and the way to use it; with model.gpus=2 the
    worker processes claim batches of it, so it is taken there."""
    from pipeline import runner
    from pipeline.config import validate
    from pipeline.context import make_context
    from pipeline.models.sparse_dnn.model import SparseDnnModel
    _, env = fresh
    with pytest.raises(ConfigError) as e:
        runner.run(compose(["model=sparse_dnn", typed, *env]), tmp_path / "out", echo=False)
    msg = str(e.value)
    assert msg.startswith(f"{named} is not used by model=sparse_dnn on the CPU backend: ") and "\n" not in msg
    assert "model.gpus" in msg
    cfg = compose(["model=sparse_dnn", typed, "model.gpus=2", *env])
    validate(cfg)
    ctx = make_context(cfg, tmp_path)
    SparseDnnModel(cfg, ctx).prepare()
    assert any("model.gpus=2: 2 worker processes" in n for n in ctx.notices)


def test_sparse_dnn_columns_say_what_the_check_holds(compose, tmp_path, fresh):
    """A variant differing from the golden set on one rounding-ambiguous row only: ok, exact outside
    the ambiguous rows (yes), one ambiguous row differing; nothing in the table says FAIL. A row
    differing outside them: not ok, no."""
    from pipeline.config import validate
    from pipeline.context import make_context
    from pipeline.models.sparse_dnn.model import SparseDnnModel
    from pipeline.results import format_table
    _, env = fresh
    cfg = compose(["model=sparse_dnn", "dataset=radixnet_1024", "dataset.inputs=random", "dataset.small.layers=4",
                   "dataset.small.images=60", "model.repeats=1", "model.warmup=0", *env])
    validate(cfg)
    model = SparseDnnModel(cfg, make_context(cfg, tmp_path))
    model.prepare()
    model.execute()
    net = model.nets[0]
    gold = [int(c) for c in net.golden]
    free = [r for r in range(net.images) if r not in gold]
    assert len(free) >= 3                                           # rows that are not categories
    net.meta["ambiguous"] = np.array(free[:2], np.int64)           # two rows are rounding-ambiguous
    row = dict(model.rows[0])
    model.rows = [row]
    model._check(net, "cpu", np.array(sorted(gold + free[:1]), np.int64), row)
    assert (row["ok"], row["exact_outside_ambiguous"], row["ambiguous"], row["ambiguous_rows_differing"]) == \
        (True, "yes", 2, 1) and not model.failures
    rep = model.report()
    assert "exact" not in rep.columns and "amb_diff" not in rep.columns
    table = format_table(rep.rows, rep.columns)
    head, _, values = table.splitlines()
    assert "FAIL" not in table and "exact_outside_ambiguous" in head and "ambiguous_rows_differing" in head
    cells = dict(zip(head.split(), values.split()))
    assert (cells["ok"], cells["exact_outside_ambiguous"], cells["ambiguous_rows_differing"]) == ("ok", "yes", "1")
    tag = f"{net.N}x{net.L}"
    assert rep.metrics[f"summary/{tag}/cpu/exact_outside_ambiguous"] == 1.0
    assert rep.metrics[f"summary/{tag}/cpu/ambiguous_rows_differing"] == 1.0
    outside = {}
    model._check(net, "cpu", np.array(sorted(gold + free[2:3]), np.int64), outside)
    assert (outside["ok"], outside["exact_outside_ambiguous"], outside["ambiguous_rows_differing"]) == (False, "no", 0)
    assert len(model.failures) == 1 and "outside the rounding-ambiguous rows" in model.failures[0]
