"""Variant registries: which variants a model has, which are ours and which are baselines, which
backend each runs on and what each needs, in one place per model (``pipeline/models/<m>/variants.py``).

A registry is plain data, importable without a GPU and without importing the model's other modules,
so that the config checks (``pipeline/config/<m>.py``), the model and its GPU code all read the same
names. :func:`select_variants` decides what runs on this backend and says so.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from pipeline.errors import ConfigError

OURS = "ours"
BASELINE = "baseline"


@dataclass(frozen=True)
class VariantInfo:
    name: str
    kind: str                      # OURS | BASELINE
    backend: str                   # "cuda" | "cpu"
    doc: str = ""
    needs: Tuple[str, ...] = ()    # importable modules it needs beyond the project's (e.g. "torch")

    def missing(self) -> List[str]:
        return [m for m in self.needs if importlib.util.find_spec(m) is None]


_BY_MODEL: Dict[str, "Registry"] = {}


class Registry:
    """The variants of one model, in the order a report lists them; ``paper`` names the variant that
    is the paper's own method (the run's last line compares the fastest with it)."""

    def __init__(self, model: str, variants: Iterable[VariantInfo], cpu_default: Optional[str] = None,
                 paper: Optional[str] = None):
        self.model = model
        self.variants = {v.name: v for v in variants}
        cpu = [v.name for v in self.variants.values() if v.backend == "cpu"]
        self.cpu_default = cpu_default or (cpu[0] if cpu else None)
        if paper is not None and paper not in self.variants:
            raise ValueError(f"registry {model}: paper variant {paper!r} is not one of its variants")
        self.paper = paper
        _BY_MODEL[model] = self

    def __contains__(self, name: str) -> bool:
        return name in self.variants

    def __getitem__(self, name: str) -> VariantInfo:
        return self.variants[name]

    def names(self, backend: Optional[str] = None, kind: Optional[str] = None) -> List[str]:
        return [v.name for v in self.variants.values()
                if (backend is None or v.backend == backend) and (kind is None or v.kind == kind)]

    def check(self, cfg) -> List[str]:
        """Raise a one-line ConfigError for a variant or baseline name this model does not have;
        returns the requested variants: model.variants, else the kernel entry's side-by-side list
        (``kernel.variants``: a model's default command times the paper's variant and the project's
        fastest), else [kernel.name]."""
        listed = [str(v) for v in (cfg.kernel.get("variants") or [])]
        key = "model.variants" if cfg.model.variants else ("kernel.variants" if listed else "kernel")
        asked = [str(v) for v in cfg.model.variants] or list(dict.fromkeys(listed)) or [str(cfg.kernel.name)]
        for k, vals in ((key, asked), ("model.baselines", [str(b) for b in cfg.model.baselines])):
            for v in vals:
                if v not in self.variants:
                    raise ConfigError(f"{k}={v!r} is not allowed: one of {', '.join(self.variants)} "
                                      f"for model={self.model}")
        return asked


@dataclass
class Selection:
    ours: List[str]
    baselines: List[str]
    notes: List[str]


def select_variants(cfg, backend: str, registry: Registry) -> Selection:
    """What runs on ``backend``: the requested variants and baselines that run there and whose
    needs are installed. On the CPU backend a request for GPU variants becomes the registry's CPU
    default; every change is explained in ``notes`` (the caller passes them to ``ctx.notice``)."""
    asked = registry.check(cfg)
    notes: List[str] = []

    def usable(names: Sequence[str], what: str) -> List[str]:
        out = []
        for n in names:
            info = registry[n]
            if info.backend != backend:
                continue
            miss = info.missing()
            if miss:
                notes.append(f"{what} {n!r} skipped: {', '.join(miss)} is not installed")
                continue
            if n not in out:
                out.append(n)
        return out

    ours = usable(asked, "variant")
    if not ours:
        if backend == "cpu" and registry.cpu_default:
            ours = [registry.cpu_default]
            notes.append(f"CPU backend: {', '.join(asked)} need a GPU; running {registry.cpu_default!r} "
                         "(the NumPy reference) instead")
        else:
            raise ConfigError(f"none of {', '.join(asked)} runs on the {backend} backend for "
                              f"model={registry.model}: choose from {', '.join(registry.names(backend))}")
    baselines = [b for b in usable([str(b) for b in cfg.model.baselines], "baseline") if b not in ours]
    skipped = [str(b) for b in cfg.model.baselines if registry[str(b)].backend != backend]
    if skipped:
        notes.append(f"{backend.upper()} backend: baseline(s) {', '.join(skipped)} not run here")
    return Selection(ours, baselines, notes)


def of_model(name: str) -> Optional[Registry]:
    """The registry of ``model.name`` (once the model's variants module is imported), else None."""
    return _BY_MODEL.get(name)
