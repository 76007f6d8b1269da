"""Config composition and validation: every model YAML with its defaults (the paper's batch size,
epochs, block size), the common knobs (used or refused), unknown keys however written, every
kernel file against the variant registries, schema errors and range checks (in-process and
through the CLI's one-line errors), and the import structure of config and models."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from pipeline.config import validate
from pipeline.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
def _kernel_options():
    """The kernel group's options: each model's default (conf/kernel/<model>_default.yaml) and
    every variant name of the registries (stored by pipeline.models.register_all)."""
    from pipeline.models import register_all
    from pipeline.registry import all_registries
    register_all()
    return sorted({p.stem for p in (CONF / "kernel").glob("*.yaml")} |
                  {v for r in all_registries() for v in r.variants})


KERNELS = _kernel_options()
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def _bcm_registry():
    from pipeline.models.bcm.variants import REGISTRY
    return REGISTRY


def _bcm_variants():
    return list(_bcm_registry().variants)


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
    f = CONF / "kernel" / f"{stem}.yaml"
    return yaml.safe_load(f.read_text())["name"] if f.is_file() else stem


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
    cfg = composed(compose, [f"kernel={stem}"], f"kernel={stem}")
    assert cfg.kernel.name == _kernel_name(stem)


@pytest.mark.parametrize("stem", KERNELS)
def test_every_kernel_valid_for_bcm(compose, stem):
    """Kernel files naming a bcm variant pass bcm's checks; others are rejected naming the kernel."""
    cfg = compose(["model=bcm", f"kernel={stem}"])
    allowed = _bcm_variants()
    name = str(cfg.kernel.name)
    if name in allowed:
        validate(cfg)
        assert _bcm_registry().check(cfg) == ([str(v) for v in cfg.kernel.variants] or [name])
    else:   # rejected by validate(), i.e. before any work or MLflow run starts
        listed = [str(v) for v in cfg.kernel.variants]
        bad = next((v for v in listed if v not in allowed), name)
        key = "kernel.variants" if listed else "kernel"
        with pytest.raises(ConfigError, match=rf"{key}='{bad}' is not allowed: one of .*fused"):
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


@pytest.mark.parametrize("model, override, key, value, allowed", [
    ("bcm", "block_size=48", "block_size", "48", "power of two"),
    ("bcm", "block_size=512", "block_size", "512", "between"),
    ("bcm", "model.block_size=48", "model.block_size", "48", "power of two"),
    ("bcm", "batch_size=0", "batch_size", "0", "positive"),
    ("bcm", "model.batch_size=0", "model.batch_size", "0", "positive"),
    ("bcm_cnn", "epochs=0", "epochs", "0", "positive"),
    ("wide_lr", "epochs=-1", "epochs", "-1", "positive"),
    ("wide_fm", "model.epochs=0", "model.epochs", "0", "positive"),
    ("sparse_dnn", "batch_size=-1", "batch_size", "-1", "0 or a positive"),
    ("bcm", "seed=-1", "seed", "-1", "non-negative"),
    ("bcm", "bench.min_repeats=0", "bench.min_repeats", "0", "positive"),
    ("bcm", "bench.max_repeats=2", "bench.max_repeats", "2", ">= bench.min_repeats"),
])
def test_range_checks_name_key_value_and_allowed(compose, model, override, key, value, allowed):
    cfg = compose([f"model={model}", override])
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
    ("+model.foo=1", ["model.foo", "not a known key"]),   # a typo added with + is refused too
    ("+foo_typo=1", ["foo_typo", "not a known key"]),
    ("++model.layerz=[A]", ["model.layerz", "model.layers"]),   # the closest key is named
    ("epochs=9", ["epochs=9", "not used by model=bcm"]),  # a common knob the model does not use
]


FAST_CLI_ERRORS = ("model.foo=1", "block_size=abc", "block_size=48", "epochs=9")   # the rest: -m slow


@pytest.mark.parametrize("override, words", [
    pytest.param(o, w, id=o, marks=() if o in FAST_CLI_ERRORS else pytest.mark.slow) for o, w in SCHEMA_ERRORS])
def test_cli_config_errors_are_one_line(cli, override, words):
    r = cli("model=bcm", override, timeout=120)
    assert r.returncode != 0, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert "schema_" not in lines[0]
    assert "+model" not in lines[0] and "To append" not in lines[0], lines[0]   # no hint to add it with +


# ------------------------------------------------------ each model's own defaults for the common knobs

# The defaults each model's config carries (conf/model/<model>.yaml). A model that does not use a
# knob has None: its top-level key stays null and a value given to it is refused. A new model adds
# its row here.
PAPER_DEFAULTS = {
    "bcm": dict(block_size=64, batch_size=128, epochs=None),        # Dong et al. Table 3
    "bcm_cnn": dict(block_size=32, batch_size=128, epochs=3),       # k=32 learns on every dataset offered
    "fewhot": dict(block_size=None, batch_size=None, epochs=None),
    "softmax_topn": dict(block_size=None, batch_size=None, epochs=None),
    "sparse_dnn": dict(block_size=None, batch_size=0, epochs=None),  # 0: all images in one batch
    "slide": dict(block_size=None, batch_size=256, epochs=3),       # SLIDE: batch 256 (Amazon-670K)
    "wide_lr": dict(block_size=None, batch_size=1024, epochs=100),  # cuWide: batch 1024; epochs: a cap (patience)
    "wide_fm": dict(block_size=None, batch_size=1024, epochs=100),
}
COMMON = ("block_size", "batch_size", "epochs")


def test_every_model_has_its_defaults_listed():
    missing = [m for m in MODELS if m not in PAPER_DEFAULTS]
    assert not missing, f"add the default block_size/batch_size/epochs of {missing} to PAPER_DEFAULTS"


@pytest.mark.parametrize("model", MODELS)
def test_model_defaults_are_its_own(compose, model):
    """Composing `model=<m>` alone gives that model's defaults, after validation also at the top
    level (what MLflow logs); the global config holds none."""
    cfg = compose([f"model={model}"])
    assert all(cfg[k] is None for k in COMMON), "conf/config.yaml must leave the common knobs null"
    validate(cfg)
    for key, want in PAPER_DEFAULTS[model].items():
        if want is None:
            assert cfg[key] is None, f"model={model} does not use {key}, yet {key}={cfg[key]}"
        else:
            assert cfg.model[key] == want, f"model={model}: model.{key}={cfg.model[key]}, expected {want}"
            assert cfg[key] == want, f"model={model}: top-level {key} not filled with the value in effect"


@pytest.mark.parametrize("model, key", [(m, k) for m in MODELS for k in COMMON])
def test_common_knob_wins_or_is_refused(compose, model, key):
    """A value typed on the command line reaches the model's key; a model that does not use the knob
    refuses it in one line naming the knob and the model."""
    value = 16 if key == "block_size" else 2
    cfg = compose([f"model={model}", f"{key}={value}"])
    if PAPER_DEFAULTS.get(model, {}).get(key) is None:
        with pytest.raises(ConfigError) as e:
            validate(cfg)
        msg = str(e.value)
        assert msg.startswith(f"{key}={value} is not used by model={model}: "), msg
        assert "\n" not in msg
    else:
        validate(cfg)
        assert cfg.model[key] == value and cfg[key] == value


def test_refusals_name_the_key_to_set(compose):
    cases = [(["model=softmax_topn", "block_size=128"], "write model.block_size=128"),
             (["model=wide_lr", "block_size=64"], "model.threads"),
             (["model=sparse_dnn", "block_size=64"], "model.block"),
             (["model=bcm", "epochs=9"], "model=bcm_cnn"),
             (["model=fewhot", "batch_size=8"], "model.rows"),
             (["model=slide", "block_size=8"], "model.K"),
             # an experiment set the model's key itself: the typed knob would be ignored
             (["model=wide_lr", "model.batch_size=256", "batch_size=512"], "write model.batch_size=512")]
    for overrides, words in cases:
        with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
            validate(compose(overrides))


def test_sparse_dnn_takes_batch_size(compose):
    cfg = compose(["model=sparse_dnn", "batch_size=4096"])
    validate(cfg)
    assert cfg.model.batch_size == 4096
    validate(compose(["model=sparse_dnn", "batch_size=0"]))      # 0: all images in one batch


def test_experiment_settings_yield_to_the_command_line(compose):
    cfg = compose(["experiment=cuwide_table4"])
    validate(cfg)
    assert cfg.model.epochs == 5 and cfg.model.batch_size == 1024
    cfg = compose(["experiment=cuwide_table4", "epochs=7", "batch_size=512"])
    validate(cfg)
    assert cfg.model.epochs == 7 and cfg.model.batch_size == 512
    cfg = compose(["experiment=bcm_cifar10_accuracy", "epochs=2"])
    validate(cfg)
    assert cfg.model.epochs == 2


# --------------------------------------------------------------- unknown keys, however written

@pytest.mark.parametrize("overrides, key", [
    (["+model.foo=1"], "model.foo"),
    (["+foo_typo=1"], "foo_typo"),
    (["model=wide_lr", "+model.lr_typo=0.1"], "model.lr_typo"),
    (["++model.tolerance2=1"], "model.tolerance2"),
    (["+dataset.foo=1"], "dataset.foo"),
    (["+kernel.foo=1"], "kernel.foo"),
    (["+kernel.params.anything=1"], "kernel.params"),   # a variant's settings are model.* keys
    (["+bench.warmupp=1"], "bench.warmupp"),
    (["model=sparse_dnn", "+dataset.neuronz=4"], "dataset.neuronz"),
])
def test_added_keys_are_refused(compose, overrides, key):
    cfg = compose(overrides)
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} is not a known key"):
        validate(cfg)


def test_free_form_dicts_take_any_key(compose):
    validate(compose(["experiment=argueta_table1", "+model.paper.A100.fewhot=[1.0]"]))


def test_closest_key_is_named(compose):
    with pytest.raises(ConfigError, match=r"did you mean model\.layers\?"):
        validate(compose(["+model.layerz=[A]"]))


# ----------------------------------------------------------- variants: one registry per model

def _registries():
    from pipeline.models import register_all
    from pipeline.registry import all_registries
    register_all()
    return {r.model: r for r in all_registries()}


def test_every_model_has_a_registry():
    regs = _registries()
    assert sorted(regs) == MODELS, f"models without a variant registry: {sorted(set(MODELS) - set(regs))}"


def test_kernel_options_are_the_registries_and_the_defaults():
    """kernel=<variant> works for every variant of every registry (no file a variant), and the only
    files of conf/kernel are the models' defaults, each naming a variant of its model."""
    regs = _registries()
    names = {v for r in regs.values() for v in r.variants}
    assert names <= set(KERNELS)
    files = sorted(p.stem for p in (CONF / "kernel").glob("*.yaml"))
    assert files == sorted(f"{m}_default" for m in regs), f"conf/kernel holds more than the defaults: {files}"
    for stem in files:
        model = stem[:-len("_default")]
        assert _kernel_name(stem) in regs[model], f"conf/kernel/{stem}.yaml names no variant of {model}"
        assert regs[model][_kernel_name(stem)].kind == "ours", f"conf/kernel/{stem}.yaml names a baseline"


@pytest.mark.parametrize("model", MODELS)
def test_bad_variant_is_refused_before_any_run(compose, model, tmp_path):
    """A variant the model does not have stops the job in validate(), before the MLflow run opens."""
    from pipeline import runner
    regs = _registries()
    other = next(s for s in KERNELS if not s.endswith("_default") and _kernel_name(s) not in regs[model])
    store = tmp_path / "store"
    cfg = compose([f"model={model}", f"kernel={other}", "backend=cpu", f"tracking.dir={store}"])
    with pytest.raises(ConfigError, match=rf"kernel='{_kernel_name(other)}' is not allowed: one of .* for model={model}"):
        runner.run(cfg, tmp_path / "out", echo=False)
    assert not (store / "mlflow.db").exists(), "an MLflow run was opened for a config that fails its checks"
    cfg = compose([f"model={model}", f"model.baselines=[{_kernel_name(other)}]", "backend=cpu"])
    with pytest.raises(ConfigError, match=r"model\.baselines="):
        validate(cfg)


def test_help_lists_every_models_variants():
    from pipeline.config import variants_help
    text = variants_help()
    for model, reg in _registries().items():
        line = next((ln for ln in text.splitlines() if ln.split() and ln.split()[0] == model), None)
        assert line is not None, f"--help has no line for {model}"
        for v in reg.variants:
            assert v in line, f"--help line of {model} lacks {v}"


def _suite_configs():
    """The runs of conf/suite/*.yaml and of the suites kept beside them (conf/suite/*/*.yaml, run
    with ``scripts/gpu_suite.py --suite FILE``)."""
    from pipeline import suite
    files = sorted(suite.SUITE_DIR.glob("*.yaml")) + sorted(suite.SUITE_DIR.glob("*/*.yaml"))
    return [(f"{f.relative_to(ROOT)}:{part}[{i}]", ov) for f in files for s in [suite.load(f)]
            for part in suite.PARTS for i, ov in enumerate(getattr(s, part))]


@pytest.mark.parametrize("name, overrides", _suite_configs(), ids=[n for n, _ in _suite_configs()])
def test_benchmark_and_sanitizer_configs_pass_the_checks(compose, name, overrides):
    """Every run of the GPU suite's lists (conf/suite/*.yaml: benchmarks and sanitizer configs)
    composes and validates, without running (a knob its model does not use would be refused only on
    the GPU machine otherwise)."""
    cfg = composed(compose, overrides, name)
    validate(cfg)


def test_every_model_package_has_a_suite_and_suite_files_are_checked(tmp_path):
    """Each model package with GPU code has conf/suite/<pkg>.yaml with benchmark and sanitizer runs;
    a malformed suite file is a one-line error naming the file and the key."""
    from pipeline import suite
    pkgs = sorted(p.name for p in (ROOT / "pipeline" / "models").iterdir() if (p / "gpu.py").is_file())
    have = suite.load_all()
    for pkg in pkgs:
        assert pkg in have and have[pkg].bench and have[pkg].sanitize, f"conf/suite/{pkg}.yaml: bench and sanitize"
    bad = tmp_path / "bad.yaml"
    bad.write_text("bench:\n  - model=bcm\nsanitise:\n  - model=bcm\n")
    with pytest.raises(ConfigError, match="bad.yaml: unknown key 'sanitise'"):
        suite.load(bad)
    bad.write_text("bench:\n  - [model=bcm, block_size=16]\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: bench\[0\] must be one run's overrides on one line"):
        suite.load(bad)
    ok = tmp_path / "mine.yaml"
    ok.write_text("bench:\n  - model=bcm block_size=16\n    model.layers=[A,B]\n")
    assert suite.load(ok).bench == [["model=bcm", "block_size=16", "model.layers=[A,B]"]]
    with pytest.raises(ConfigError, match="no suite nope"):
        suite.load_all(["nope"])


def test_an_unknown_key_of_a_nested_schema_is_named():
    """``model.warp.bogus=1`` (no ``+``): Hydra's refusal names the nested schema class; the one line
    names the key and the nested schema's known keys."""
    from pipeline.app import _unknown_key
    from pipeline.models import register_all
    register_all()
    text = "Could not override 'model.warp.bogus'.\nKey 'bogus' not in 'WarpConf'\n    full_key: model.warp.bogus"
    assert _unknown_key(text).startswith("model.warp.bogus is not a known key in model.warp; known keys: samples,")
    text = "Could not override 'dataset.layout.sepp'.\nKey 'sepp' not in 'LayoutConf'"
    assert _unknown_key(text) == "dataset.layout.sepp is not a known key in dataset.layout: did you mean dataset.layout.sep?"


def test_dataset_small_is_the_datasets_size_preset(compose, monkeypatch, tmp_path):
    """dataset.small, like model.small: on size=small its keys replace the dataset's (one line says
    so, a typed override of one of them is named as not used); it may name only keys of the
    dataset's schema, not its identity; size=full leaves the dataset as it is."""
    from pipeline import config
    from pipeline.context import make_context
    typed = ["dataset=radixnet_4096", "dataset.layers=6", "dataset.inputs=random"]
    monkeypatch.setattr(config, "task_overrides", lambda: typed)
    cfg = compose(["model=sparse_dnn", "dataset=radixnet_4096", "dataset.layers=6", "dataset.inputs=random",
                   "backend=cpu"])
    validate(cfg)
    notices = make_context(cfg, tmp_path).notices
    d = cfg.dataset
    assert (d.neurons, d.layers, d.images, d.inputs) == (1024, 24, 400, "random")
    assert notices[1:] == [
        "size=small: dataset.layers=6 not used (the small preset replaces it); pass size=full to use it",
        "size=small: dataset neurons=1024 layers=24 images=400 (dataset.small; dataset.small=null keeps the full "
        "settings)"]
    cfg = compose(["model=sparse_dnn", "dataset=radixnet_4096", "dataset.layers=6", "size=full", "backend=cpu"])
    make_context(cfg, tmp_path)
    assert (cfg.dataset.neurons, cfg.dataset.layers) == (4096, 6)
    for key in ("nope", "name", "path"):             # not a key of the schema; the dataset's identity
        with pytest.raises(ConfigError, match=rf"^dataset\.small\.{key}=.* is not allowed: a key of dataset="):
            validate(compose(["model=sparse_dnn", "dataset=radixnet_4096", f"+dataset.small.{key}=x"]))


def test_a_typed_key_inside_a_small_block_is_named_as_not_used(compose, monkeypatch):
    """A small block that sets nested keys (bcm's model.small.shapes) replaces a typed key inside
    them, or the dict holding them, but not a sibling it leaves alone."""
    from pipeline import config
    typed = ["model=bcm", "model.shapes.A.out=2048", "model.shapes.A.type=fc", "model.shapes={}", "block_size=16"]
    monkeypatch.setattr(config, "task_overrides", lambda: typed)
    assert config.replaced_by_small_preset(compose(["model=bcm"])) == ["model.shapes.A.out=2048", "model.shapes={}"]
