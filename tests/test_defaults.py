"""Every model's default command runs on a fresh machine: the CPU backend with an empty data_dir
(model=bcm_cnn falls back from CIFAR-10 to scikit-learn's digits and says so in one line), and
the bcm_cnn warning for a block larger than a layer it compresses."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
MODELS = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml"))


def _runs(store):
    from mlflow.tracking import MlflowClient
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=100)


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_default_command_on_a_fresh_machine(cli, tmp_path, model):
    empty = tmp_path / "empty-data"
    empty.mkdir()
    r = cli(f"model={model}", "backend=cpu", f"data_dir={empty}", f"cache_dir={tmp_path / 'cache'}", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [x.info.status for x in _runs(tmp_path)] == ["FINISHED"]
    if model == "bcm_cnn":
        notes = [ln for ln in r.stderr.splitlines() if "training on digits instead" in ln]
        assert len(notes) == 1 and "python -m pipeline.data.fetch cifar10" in notes[0], r.stderr


def test_bcm_cnn_default_falls_back_to_digits(compose, tmp_path, prepared):
    empty = tmp_path / "empty"
    empty.mkdir()
    model, ctx = prepared("model=bcm_cnn", "backend=cpu", f"data_dir={empty}")
    assert model.dataset == "digits"
    notes = [n for n in ctx.notices if "instead" in n and "data_dir" in n]
    assert notes == [f"dataset cifar10 is not in data_dir={empty}: training on digits instead "
                     "(get it with: python -m pipeline.data.fetch cifar10)"]


def test_bcm_cnn_asked_for_cifar10_fails_without_it(compose, tmp_path, prepared):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=r"dataset 'cifar10' not found: .*python -m pipeline\.data\.fetch cifar10"):
        prepared("model=bcm_cnn", "backend=cpu", "dataset=cifar10", f"data_dir={empty}")
    with pytest.raises(DataError, match=r"dataset 'mnist' not found.*python -m pipeline\.data\.fetch mnist"):
        prepared("model=bcm_cnn", "backend=cpu", "dataset=mnist", f"data_dir={empty}")


@pytest.mark.parametrize("k, warned", [(64, True), (32, False), (16, False)])
def test_bcm_cnn_warns_when_a_block_is_larger_than_a_layer(compose, tmp_path, k, warned, prepared):
    model, ctx = prepared("model=bcm_cnn", "backend=cpu", "dataset=digits", f"block_size={k}")
    warnings = [n for n in ctx.notices if n.startswith("warning:")]
    if warned:
        assert warnings == [f"warning: block_size={k} is larger than layer conv2 of the digits network "
                            "(144 -> 32 features), so the layer is one padded block and may not learn; "
                            "use block sizes up to 32"]
    else:
        assert warnings == []
    model, ctx = prepared("model=bcm_cnn", "backend=cpu", "dataset=digits", "model.block_sizes=[16,64]")
    assert any(n.startswith("warning: model.block_sizes=64 ") for n in ctx.notices), ctx.notices


def test_bcm_layer_sizes_of_the_paper_network():
    """CIFAR-10's network: every BCM layer is at least 64 wide, so the paper's k = 16, 32, 64 never warn."""
    from pipeline.models.bcm_cnn.net import ARCHS, Net, bcm_layer_sizes
    sizes = bcm_layer_sizes(ARCHS["cifar10"], (32, 32, 3))
    assert min(min(i, o) for _, i, o in sizes) == 64
    net = Net(ARCHS["digits"], (8, 8, 1), True, 4)       # the names and sizes Net gives its layers
    assert [(lin.name, lin.in_f, lin.out_f) for lin in net.linears if lin.bcm] == \
        bcm_layer_sizes(ARCHS["digits"], (8, 8, 1))
