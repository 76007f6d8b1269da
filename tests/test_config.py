"""Config composition and validation: every model YAML with its defaults, every kernel file for
bcm, schema errors and range checks (in-process and through the CLI's one-line errors)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from pipeline.config import check_variants, validate
from pipeline.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
KERNELS = sorted(p.stem for p in (CONF / "kernel").glob("*.yaml"))
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def _bcm_variants():
    from pipeline.models.bcm.model import BcmModel
    return BcmModel.GPU_VARIANTS + BcmModel.CPU_VARIANTS


def composed(compose, overrides, what):
    """compose(overrides), failing the test with Hydra's message condensed to one line."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from pipeline.app import one_line
    try:
        cfg = compose(overrides)
        OmegaConf.to_container(cfg, resolve=True)   # every interpolation resolves
        return cfg
    except (HydraException, OmegaConfBaseException) as e:
        msg = one_line(e)
    pytest.fail(f"{what} does not compose ({' '.join(overrides)}): {msg}", pytrace=False)


def _kernel_name(stem: str) -> str:
    return yaml.safe_load((CONF / "kernel" / f"{stem}.yaml").read_text())["name"]


def test_group_folders_exist():
    for g in ("model", "dataset", "kernel", "experiment", "tracking"):
        assert (CONF / g).is_dir(), f"conf/{g}/ is missing"
    assert "bcm" in MODELS


@pytest.mark.parametrize("model", MODELS)
def test_every_model_composes_with_its_defaults(compose, model):
    cfg = composed(compose, [f"model={model}"], f"conf/model/{model}.yaml")
    assert cfg.model.name, f"conf/model/{model}.yaml has no name"
    impl = str(cfg.model.impl)
    assert ":" in impl and impl.startswith("pipeline.models."), impl
    assert cfg.dataset.name, f"conf/dataset/{model}_default.yaml has no name"
    assert cfg.kernel.name, f"conf/kernel/{model}_default.yaml has no name"
    # the model's schema is in the defaults list, so Hydra types the node
    assert OmegaConf.get_type(cfg.model) is not dict, f"conf/model/{model}.yaml lists no schema"
    validate(cfg)


@pytest.mark.parametrize("model", MODELS)
def test_every_model_has_default_dataset_and_kernel_files(model):
    assert (CONF / "dataset" / f"{model}_default.yaml").is_file()
    assert (CONF / "kernel" / f"{model}_default.yaml").is_file()


def _try_compose(compose, overrides):
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from pipeline.app import one_line
    try:
        cfg = compose(overrides)
        OmegaConf.to_container(cfg, resolve=True)
        validate(cfg)
        return None
    except (HydraException, OmegaConfBaseException, ConfigError) as e:
        return one_line(e) if not isinstance(e, ConfigError) else str(e)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes(compose, experiment):
    """`experiment=<name>` composes and validates on its own (the file picks its model) or, for an
    experiment written for one model, with `model=<that model>`."""
    alone = _try_compose(compose, [f"experiment={experiment}"])
    if alone is None:
        return
    for m in MODELS:
        if _try_compose(compose, [f"model={m}", f"experiment={experiment}"]) is None:
            return
    pytest.fail(f"conf/experiment/{experiment}.yaml composes with no model: {alone}", pytrace=False)


@pytest.mark.parametrize("stem", KERNELS)
def test_kernel_file_composes(compose, stem):
    cfg = composed(compose, [f"kernel={stem}"], f"conf/kernel/{stem}.yaml")
    assert cfg.kernel.name == _kernel_name(stem)


@pytest.mark.parametrize("stem", KERNELS)
def test_every_kernel_valid_for_bcm(compose, stem):
    """Kernel files naming a bcm variant pass bcm's checks; others are rejected naming the kernel."""
    cfg = compose(["model=bcm", f"kernel={stem}"])
    allowed = _bcm_variants()
    name = str(cfg.kernel.name)
    if name in allowed:
        validate(cfg)
        assert check_variants(cfg, allowed) == [name]
    else:   # rejected by validate(), i.e. before any work or MLflow run starts
        with pytest.raises(ConfigError, match=rf"kernel='{name}' is not allowed: one of .*fused"):
            validate(cfg)


def test_common_knobs_reach_model(compose):
    cfg = compose(["model=bcm", "block_size=16", "batch_size=32", "seed=3"])
    assert cfg.model.block_size == 16 and cfg.model.batch_size == 32 and cfg.seed == 3
    assert Path(cfg.tracking.dir).is_absolute()
    assert Path(cfg.cache_dir).is_absolute()


def test_data_dir_env(compose, monkeypatch, tmp_path):
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path))
    assert compose([]).data_dir == str(tmp_path)
    monkeypatch.delenv("PIPELINE_DATA_DIR")
    assert compose([]).data_dir == str(ROOT / "data")


@pytest.mark.parametrize("override, key, value, allowed", [
    ("block_size=48", "block_size", "48", "power of two"),
    ("block_size=512", "block_size", "512", "between"),
    ("batch_size=0", "batch_size", "0", "positive"),
    ("epochs=0", "epochs", "0", "positive"),
    ("seed=-1", "seed", "-1", "non-negative"),
    ("bench.min_repeats=0", "bench.min_repeats", "0", "positive"),
    ("bench.max_repeats=2", "bench.max_repeats", "2", ">= bench.min_repeats"),
])
def test_range_checks_name_key_value_and_allowed(compose, override, key, value, allowed):
    cfg = compose(["model=bcm", override])
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{key}={value}") or msg.startswith(f"{key}='{value}'"), msg
    assert "not allowed" in msg and allowed in msg, msg


# --------------------------------------------------------------- through the CLI: one line, exit != 0

SCHEMA_ERRORS = [
    ("model.foo=1", ["model.foo"]),                       # unknown key
    ("foo=1", ["foo"]),                                   # unknown top-level key
    ("block_size=abc", ["block_size", "abc"]),            # wrong type
    ("model.tolerance=abc", ["model.tolerance", "abc"]),  # wrong type in a model schema
    ("backend=gpu", ["gpu", "auto", "cuda", "cpu"]),      # bad enum
    ("kernel=nope", ["kernel/nope", "fused"]),            # unknown group option
    ("model=nope", ["model/nope", "bcm"]),                # unknown model
    ("block_size=48", ["block_size=48", "power of two"]),  # range
    ("batch_size=0", ["batch_size=0", "positive"]),       # range
]


@pytest.mark.parametrize("override, words", SCHEMA_ERRORS, ids=[o for o, _ in SCHEMA_ERRORS])
def test_cli_config_errors_are_one_line(cli, override, words):
    r = cli("model=bcm", override, timeout=120)
    assert r.returncode != 0, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert "schema_" not in lines[0]
