"""Config schemas (dataclasses registered in Hydra's ConfigStore) and post-composition checks.

The core schemas live here; each model keeps its own in ``pipeline/models/<m>/config.py``
(imported by :func:`pipeline.models.register_all`, which calls :func:`register_core` first). A model
schema is registered as ``group="model", name="schema_<model>"`` and its YAML lists it first in its
defaults, so Hydra rejects an unknown key or a wrong type before any work. Range and consistency
checks that Hydra cannot express run in :func:`validate` right after composition and raise
:class:`pipeline.errors.ConfigError`. This layer imports no model: a model's variants are known
through :mod:`pipeline.registry`, its checks through :func:`validator`.
"""
from __future__ import annotations

import dataclasses
import difflib
import enum
import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from pipeline import registry as registries
from pipeline.errors import ConfigError, require
from pipeline.root import PROJECT_ROOT

class Backend(enum.Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class Size(enum.Enum):
    auto = "auto"    # full on a GPU, small on the CPU backend
    full = "full"    # the paper's sizes
    small = "small"  # a preset that finishes in seconds on a CPU


@dataclass
class BenchConf:
    warmup: int = 3              # untimed calls before timing (compilation, plans, caches)
    min_repeats: int = 10        # timed calls at least
    max_repeats: int = 200       # timed calls at most
    min_time_ms: float = 100.0   # keep repeating until this much device time is measured
    cuda_graph: bool = True      # replay variants that allow it (Variant.graph) as one CUDA graph
    hold: bool = True            # GPU: a hold kernel hides the host's issue time (device time only)
    cpu_threads: int = 1         # CPU: BLAS / OpenMP threads while timing (threadpoolctl; 0: as they are)


@dataclass
class TrackingConf:
    enabled: bool = True
    dir: str = "${project_root:}/outputs"   # mlflow.db and mlartifacts/ live here
    uri: str = ""                           # a tracking server (tracking=server); empty: the SQLite store in dir
    experiment: str = ""                    # default: the model's name
    run_name: str = ""                      # default: built from the overrides


@dataclass
class PoolConf:
    """GPUs for parallel sweep jobs (pipeline/gpu/pool.py)."""
    enabled: str = "auto"          # auto (parallel launchers: joblib, submitit local) | true | false
    gpus: List[str] = field(default_factory=list)   # empty: every visible GPU
    share: bool = False            # true: jobs may share a GPU (the report says so next to every time)
    dir: str = "${cache_dir}/gpu-pool"   # one lock file per GPU
    wait_s: float = 0.0            # give up waiting for a free GPU after this long (0: wait)
    assigned: str = ""             # set by the job: the GPU(s) it holds (a param of its run)


@dataclass
class LauncherConf:
    gpus_per_job: int = 1          # GPUs each job of a parallel sweep holds


@dataclass
class KernelConf:
    """``kernel=<variant>``: the one variant under test (docs/usage.md); its options are the
    registries' variant names (:func:`store_kernel_options`)."""
    name: str = MISSING                     # the variant under test
    variants: List[str] = field(default_factory=list)   # the default entry's side-by-side list


@dataclass
class ModelConf:
    """Fields every model has. A model's schema subclasses this.

    ``TOP_LEVEL_HINTS`` (a class attribute, not a key) tells a user who typed a common top-level
    knob (``block_size``, ``batch_size``, ``epochs``) that this model does not use what to write
    instead, e.g. ``{"block_size": "model.block_size (threads per block)"}``."""
    TOP_LEVEL_HINTS: ClassVar[Dict[str, str]] = {}
    name: str = MISSING
    impl: str = MISSING                      # "package.module:Class"
    variants: List[str] = field(default_factory=list)   # empty: [kernel.name]
    baselines: List[str] = field(default_factory=list)  # timed beside the variants, same run
    tolerance: float = 1e-4                  # max relative error against the float64 reference
    # size=small (the CPU backend's preset, seconds): these model keys replace the others; null: none
    small: Optional[Dict[str, Any]] = field(default_factory=dict)


@dataclass
class DatasetConf:
    name: str = MISSING
    kind: str = "synthetic"                  # synthetic | real
    path: str = ""
    fallback: str = ""                       # a model default's stand-in when this data is absent (one-line notice)
    small: Optional[Dict[str, Any]] = field(default_factory=dict)   # size=small: these dataset keys replace the others; null: none


@dataclass
class Config:
    model: Any = MISSING
    dataset: Any = MISSING
    kernel: KernelConf = MISSING
    backend: Backend = Backend.auto
    size: Size = Size.auto
    seed: int = 0
    block_size: Optional[int] = None        # common knobs: null = the model's own default (see above)
    batch_size: Optional[int] = None
    epochs: Optional[int] = None
    gpu: int = 0
    data_dir: str = "${oc.env:PIPELINE_DATA_DIR,${project_root:}/data}"
    cache_dir: str = "${project_root:}/outputs/cache"
    bench: BenchConf = field(default_factory=BenchConf)
    tracking: TrackingConf = field(default_factory=TrackingConf)
    pool: PoolConf = field(default_factory=PoolConf)
    launcher: LauncherConf = field(default_factory=LauncherConf)
    progress: bool = True


_registered = False
_validators: Dict[str, Callable[[DictConfig], None]] = {}


def validator(model_name: str):
    """Decorator: register a model's post-composition check ``fn(cfg)`` (raise ConfigError)."""
    def deco(fn):
        _validators[model_name] = fn
        return fn
    return deco


def register_core() -> None:
    """Register the core schemas and the resolvers with Hydra's ConfigStore (idempotent);
    :func:`pipeline.models.register_all` adds every model's."""
    global _registered
    if _registered:
        return
    for name, fn in (("project_root", lambda: str(PROJECT_ROOT)), ("first", first),
                     ("variants_help", lambda: variants_help()), ("groups_help", lambda: groups_help())):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    cs = ConfigStore.instance()
    cs.store(name="schema_config", node=Config)
    cs.store(group="kernel", name="schema_kernel", node=KernelConf)
    cs.store(group="dataset", name="schema_dataset", node=DatasetConf)
    cs.store(group="model", name="schema_model", node=ModelConf)
    importlib.import_module(f"{__name__}.xc")          # the extreme-classification dataset schema
    _registered = True


def store_kernel_options() -> None:
    """The ``kernel`` group's options: one per variant name of any model's registry (only each
    model's default is a file: ``conf/kernel/<model>_default.yaml``)."""
    cs = ConfigStore.instance()
    for reg in registries.all_registries():
        for name in reg.variants:
            cs.store(group="kernel", name=name, node=KernelConf(name=name))


def store(group: str, name: str, node: Any) -> None:
    ConfigStore.instance().store(group=group, name=name, node=node)


def first(*values: Any) -> Any:
    """Resolver ``${first:a,b,...}``: the first argument that is not null (a model's default for a
    common knob: ``${first:${batch_size},1024}``)."""
    return next((v for v in values if v is not None), None)


def variants_help() -> str:
    """One line per model: its variants (ours, then baselines) by backend; for ``--help``."""
    lines = []
    for reg in registries.all_registries():
        parts = []
        for backend in ("cuda", "cpu"):
            ours = reg.names(backend, "ours")
            base = reg.names(backend, "baseline")
            if ours or base:
                parts.append(f"{'GPU' if backend == 'cuda' else 'CPU'}: {', '.join(ours)}"
                             + (f" | baselines {', '.join(base)}" if base else ""))
        lines.append(f"  {reg.model:<13} {'; '.join(parts)}")
    return "\n".join(lines)


HELP_GROUPS = ("model", "dataset", "experiment", "tracking")   # kernel: the variants, listed per model


def groups_help() -> str:
    """The options a user types, one line per group, for ``--help``: the files of ``conf/<group>/``
    (not the schemas, nor the ``<model>_default`` entries a model picks by itself)."""
    from pipeline.root import CONF_DIR
    lines = []
    for group in HELP_GROUPS:
        names = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml") if not p.stem.endswith("_default"))
        lines.append(f"{group}: {', '.join(names)}")
    return "\n".join(lines)


# ---------------------------------------------------------------- validation after composition

# what a size=small preset (``<group>.small``) may not replace: the identity of the model or dataset
SMALL_IDENTITY = {"model": ("small", "name", "impl", "variants", "baselines"),
                  "dataset": ("small", "name", "kind", "format", "path", "fallback")}


def check_small_keys(cfg) -> None:
    """``model.small`` / ``dataset.small`` may replace only keys of their schema, not its identity:
    one-line ConfigError naming ``<group>.small.<key>``."""
    for group, identity in SMALL_IDENTITY.items():
        node = cfg[group]
        t = OmegaConf.get_type(node)
        known = _schema_fields(t) if t is not None and dataclasses.is_dataclass(t) else list(node)
        keys = [k for k in known if k not in identity]
        for k in node.get("small") or {}:
            require(k in keys, f"{group}.small.{k}", node.small[k], f"a key of {group}={node.name}: {', '.join(keys)}")


def preset_key(group: str, small=()) -> Callable[[str], str]:
    """The name a check gives key ``k`` of ``group`` (model, dataset): ``<group>.small.<k>`` when the
    size=small preset's keys ``small`` set it (the check then runs on :func:`with_small`), else
    ``<group>.<k>``."""
    return lambda k: f"{group}.small.{k}" if k in small else f"{group}.{k}"


def with_small(node: DictConfig) -> DictConfig:
    """The model or dataset config with its size=small preset applied (a copy; ``node`` itself when it has none)."""
    return OmegaConf.merge(node, dict(node.small)) if node.get("small") else node


def apply_small_preset(cfg: DictConfig, group: str = "model") -> Optional[str]:
    """On size=small: the keys of ``<group>.small`` replace the group's, in ``cfg`` (which every stage
    and loader reads); returns the line that says so (None without a preset)."""
    node = cfg[group]
    small = node.get("small")
    if not small:
        return None
    merged = with_small(node)
    for k in small:
        node[k] = merged[k]
    said = " ".join(f"{k}={_flow(v)}" for k, v in OmegaConf.to_container(small).items())
    return f"size=small: {group} {said} ({group}.small; {group}.small=null keeps the full settings)"


def _flow(v: Any) -> str:
    """A value as an override would write it: ``{A: {out: 256}}`` for a dict."""
    return "{" + ", ".join(f"{k}: {_flow(x)}" for k, x in v.items()) + "}" if isinstance(v, dict) else str(v)


def is_pow2(x: int) -> bool:
    return isinstance(x, int) and x > 0 and (x & (x - 1)) == 0


# ------------------------------------------------------------- unknown keys, however written


def _schema_fields(cls) -> List[str]:
    return [f.name for f in dataclasses.fields(cls)]


def unknown_key_message(full_key: str, known: List[str]) -> str:
    """One line for a key no schema has: the closest known key, else the known keys."""
    prefix, _, leaf = full_key.rpartition(".")
    close = difflib.get_close_matches(leaf, known, n=1, cutoff=0.6)
    dotted = (lambda k: f"{prefix}.{k}" if prefix else k)
    where = f" in {prefix}" if prefix else ""
    if close:
        return f"{full_key} is not a known key{where}: did you mean {dotted(close[0])}?"
    return f"{full_key} is not a known key{where}; known keys: {', '.join(known)}"


def schema_class(name: str):
    """The schema dataclass named ``name``: one registered in the ConfigStore, or the type of a field
    of one (a nested schema such as ``model.warp``'s)."""
    def stored(d):                      # the types of the ConfigStore's nodes
        for v in d.values():
            if isinstance(v, dict):
                yield from stored(v)
            elif getattr(v, "node", None) is not None:
                yield OmegaConf.get_type(v.node)

    def schemas(t, seen):               # t and the schemas of its fields, depth first
        if t is None or not dataclasses.is_dataclass(t) or t in seen:
            return
        seen.add(t)
        yield t
        for f in dataclasses.fields(t):
            if isinstance(f.type, type):
                yield from schemas(f.type, seen)
            else:                       # a string annotation: the type of the default
                yield from schemas(type(f.default_factory() if f.default_factory is not dataclasses.MISSING
                                        else f.default), seen)
    return next((t for root in stored(ConfigStore.instance().repo) for t in schemas(root, set())
                 if t.__name__ == name), None)


def check_keys(cfg: DictConfig, node: Any = None, prefix: str = "") -> None:
    """Raise a one-line ConfigError for a key that the node's schema does not declare (a key added
    with ``+``/``++`` passes Hydra's own check; this one catches it). Dict-typed fields
    (``model.paper``) take any key."""
    node = cfg if node is None else node
    t = OmegaConf.get_type(node)
    if not (t is not None and dataclasses.is_dataclass(t)):
        return
    known = _schema_fields(t)
    for key in node.keys():
        key = str(key)
        if prefix == "" and key == "hydra":
            continue
        full = f"{prefix}{key}"
        if key not in known:
            raise ConfigError(unknown_key_message(full, known))
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing() \
                and not child._is_interpolation():
            check_keys(cfg, child, f"{full}.")


# ----------------------------------------------------------------------- the common knobs

COMMON_KEYS = ("block_size", "batch_size", "epochs")


def uses(cfg: DictConfig, key: str) -> List[str]:
    """The model keys whose value interpolates the top-level ``key`` (``${key}`` inside them)."""
    raw = OmegaConf.to_container(cfg.model, resolve=False)
    pat = re.compile(r"\$\{" + re.escape(key) + r"\}")
    return [k for k, v in raw.items() if isinstance(v, str) and pat.search(v)]


def knob(cfg: DictConfig, key: str) -> str:
    """The name a range error about the model's ``key`` should show: the top-level knob when the
    user set it there, else ``model.<key>``."""
    if key in COMMON_KEYS and cfg.get(key) is not None and key in uses(cfg, key):
        return key
    return f"model.{key}"


def replaced_by_small_preset(cfg: DictConfig) -> List[str]:
    """The overrides of this run (``key=value``, as typed) that size=small replaces by a small preset
    (the keys of ``model.small`` and ``dataset.small``): on the CPU backend a user who typed
    ``dataset.rows=100000`` is told the run does not use it. Empty outside a Hydra run."""
    keys = {k for g in SMALL_IDENTITY if cfg[g].get("small") for k in _dotted(g, OmegaConf.to_container(cfg[g].small))}

    def replaced(key: str) -> bool:        # the key, a key inside it or a dict holding it (not a group: model=)
        return any(key == k or key.startswith(k + ".") or ("." in key and k.startswith(key + ".")) for k in keys)
    return [o for o in task_overrides() or [] if replaced(o.split("=", 1)[0].lstrip("+~"))]


def _dotted(prefix: str, v: Any) -> List[str]:
    """The dotted keys of the leaves of ``v`` under ``prefix`` (``model.shapes.A.out``)."""
    return [k for key, x in v.items() for k in _dotted(f"{prefix}.{key}", x)] if isinstance(v, dict) else [prefix]


def task_overrides() -> Optional[List[str]]:
    """This run's command-line overrides (``key=value``, as typed); None outside a Hydra run (a
    test, the API)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        return list(HydraConfig.get().overrides.task)
    except Exception:
        return None


def check_common(cfg: DictConfig) -> None:
    """A top-level common knob that is set must be used by the model (else a one-line error naming
    the key to set instead) and be a positive integer (0 where the model's key allows it)."""
    t = OmegaConf.get_type(cfg.model)
    hints = getattr(t, "TOP_LEVEL_HINTS", {}) if t is not None else {}
    name = cfg.model.name
    for key in COMMON_KEYS:
        v = cfg.get(key)
        if v is None:
            continue
        fields = uses(cfg, key)
        if not fields:
            if key in hints:
                raise ConfigError(f"{key}={v} is not used by model={name}: {hints[key].format(value=v)}")
            if key in cfg.model:
                raise ConfigError(f"{key}={v} is not used by model={name}: model.{key} is set to "
                                  f"{cfg.model[key]} (by an experiment or an override); write model.{key}={v}")
            raise ConfigError(f"{key}={v} is not used by model={name}: the model has no such setting")
        zero_ok = bool(t is not None and dataclasses.is_dataclass(t) and any(
            f.name == fields[0] and f.metadata.get("zero_ok") for f in dataclasses.fields(t)))
        require(isinstance(v, int) and (v > 0 or (zero_ok and v == 0)), key, v,
                "0 or a positive integer" if zero_ok else "a positive integer")


def fill_common(cfg: DictConfig) -> None:
    """Set each common knob the model uses to the value in effect (what MLflow logs as params)."""
    for key in COMMON_KEYS:
        fields = uses(cfg, key)
        if fields and cfg.get(key) is None:
            cfg[key] = cfg.model[fields[0]]


def validate(cfg: DictConfig) -> None:
    check_keys(cfg)
    check_common(cfg)
    require(cfg.seed >= 0, "seed", cfg.seed, "a non-negative integer")
    require(cfg.bench.min_repeats > 0, "bench.min_repeats", cfg.bench.min_repeats, "a positive integer")
    require(cfg.bench.max_repeats >= cfg.bench.min_repeats, "bench.max_repeats", cfg.bench.max_repeats,
            f">= bench.min_repeats ({cfg.bench.min_repeats})")
    require(cfg.bench.warmup >= 0, "bench.warmup", cfg.bench.warmup, "a non-negative integer")
    require(cfg.bench.cpu_threads >= 0, "bench.cpu_threads", cfg.bench.cpu_threads,
            "0 (the thread pools as they are) or a positive number of threads")
    require(cfg.bench.min_time_ms >= 0, "bench.min_time_ms", cfg.bench.min_time_ms, "a non-negative number of ms")
    require(cfg.gpu >= 0, "gpu", cfg.gpu, "a device index (0, 1, ...)")
    require(cfg.model.tolerance >= 0, "model.tolerance", cfg.model.tolerance, "a non-negative relative error")
    require(str(cfg.pool.enabled).lower() in ("auto", "true", "false"), "pool.enabled", cfg.pool.enabled,
            "auto, true or false")
    require(cfg.pool.wait_s >= 0, "pool.wait_s", cfg.pool.wait_s, "0 (wait) or a positive number of seconds")
    require(cfg.launcher.gpus_per_job >= 1, "launcher.gpus_per_job", cfg.launcher.gpus_per_job, "a positive integer")
    check_small_keys(cfg)
    reg = registries.of_model(str(cfg.model.name))
    if reg is not None:
        reg.check(cfg)
    fn = _validators.get(cfg.model.name)
    if fn is not None:
        fn(cfg)
    fill_common(cfg)


def check_no_dataset(cfg) -> None:
    """For a model that generates its inputs and reads no dataset (``dataset: <model>_default``,
    named ``synthetic``): a one-line ConfigError for ``dataset=<other>``, which it would ignore."""
    name = str(cfg.dataset.get("name", ""))
    require(name == "synthetic", "dataset", name,
            f"leave it out: model={cfg.model.name} generates its inputs and reads no dataset")
