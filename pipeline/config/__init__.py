"""Config schemas (dataclasses registered in Hydra's ConfigStore) and post-composition checks.

Core schemas live here; each model adds its own in ``pipeline/config/<model>.py`` (imported
automatically by :func:`register_all`). A model schema is registered as ``group="model",
name="schema_<model>"`` and its YAML lists it first in its defaults, so Hydra rejects an unknown
key or a wrong type before any work. Range and consistency checks that Hydra cannot express run in
:func:`validate` right after composition and raise :class:`pipeline.errors.ConfigError`.
"""
from __future__ import annotations

import enum
import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from pipeline.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parents[2]


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
    name: str = MISSING                     # the variant under test
    params: Dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelConf:
    """Fields every model has. A model's schema subclasses this."""
    name: str = MISSING
    impl: str = MISSING                      # "package.module:Class"
    variants: List[str] = field(default_factory=list)   # empty: [kernel.name]
    baselines: List[str] = field(default_factory=list)  # timed beside the variants, same run
    tolerance: float = 1e-4                  # max relative error against the float64 reference


@dataclass
class DatasetConf:
    name: str = MISSING
    kind: str = "synthetic"                  # synthetic | real
    path: str = ""


@dataclass
class Config:
    model: Any = MISSING
    dataset: Any = MISSING
    kernel: KernelConf = MISSING
    backend: Backend = Backend.auto
    size: Size = Size.auto
    seed: int = 0
    block_size: int = 64
    batch_size: int = 128
    epochs: int = 3
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


def register_all() -> None:
    """Register every schema with Hydra's ConfigStore (idempotent)."""
    global _registered
    if _registered:
        return
    if not OmegaConf.has_resolver("project_root"):
        OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT))
    cs = ConfigStore.instance()
    cs.store(name="schema_config", node=Config)
    cs.store(group="kernel", name="schema_kernel", node=KernelConf)
    cs.store(group="dataset", name="schema_dataset", node=DatasetConf)
    cs.store(group="model", name="schema_model", node=ModelConf)
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")   # each registers its own schemas
    _registered = True


def store(group: str, name: str, node: Any) -> None:
    ConfigStore.instance().store(group=group, name=name, node=node)


# ---------------------------------------------------------------- validation after composition

def require(cond: bool, key: str, value: Any, allowed: str) -> None:
    """Raise a one-line ConfigError naming the key, the value and what is allowed."""
    if not cond:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def is_pow2(x: int) -> bool:
    return isinstance(x, int) and x > 0 and (x & (x - 1)) == 0


def validate(cfg: DictConfig) -> None:
    require(cfg.batch_size > 0, "batch_size", cfg.batch_size, "a positive integer")
    require(cfg.seed >= 0, "seed", cfg.seed, "a non-negative integer")
    require(cfg.epochs > 0, "epochs", cfg.epochs, "a positive integer")
    require(cfg.bench.min_repeats > 0, "bench.min_repeats", cfg.bench.min_repeats, "a positive integer")
    require(cfg.bench.max_repeats >= cfg.bench.min_repeats, "bench.max_repeats", cfg.bench.max_repeats,
            f">= bench.min_repeats ({cfg.bench.min_repeats})")
    require(cfg.bench.warmup >= 0, "bench.warmup", cfg.bench.warmup, "a non-negative integer")
    fn = _validators.get(cfg.model.name)
    if fn is not None:
        fn(cfg)


def check_variants(cfg: DictConfig, allowed: List[str]) -> List[str]:
    """The variants this run times (model.variants, else [kernel.name]), each checked against
    ``allowed``; raises a one-line ConfigError naming the bad one."""
    key = "model.variants" if cfg.model.variants else "kernel"
    names = list(cfg.model.variants) or [cfg.kernel.name]
    for k, vals in ((key, names), ("model.baselines", list(cfg.model.baselines))):
        for v in vals:
            require(v in allowed, k, v, f"one of {', '.join(allowed)} for model={cfg.model.name}")
    return names
