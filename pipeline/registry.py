"""Variant registries: which variants a model has, which are ours and which are baselines, which
backend each runs on and what each needs, in one place per model (``pipeline/models/<m>/variants.py``).

A registry is plain data, importable without a GPU and without importing the model's other modules,
so that the config checks (``pipeline/models/<m>/config.py``), the model and its GPU code all read
the same names. Every registry made is listed by :func:`all_registries` (``--help``, the ``kernel``
group's options, the checks of :func:`pipeline.config.validate`). :func:`select_variants`, the one
place every model asks, decides what runs on this backend and says so.
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
    backend: str                   # "cuda" | "cpu" | "any" (a host trainer a GPU run also times)
    doc: str = ""
    needs: Tuple[str, ...] = ()    # importable modules it needs beyond the project's (e.g. "torch")

    def runs_on(self, backend: str) -> bool:
        return self.backend in (backend, "any")

    def missing(self, backend: str) -> List[str]:
        """Why each need of this variant is unusable here (empty: it can run)."""
        out = []
        for m in self.needs:
            if importlib.util.find_spec(m) is None:
                out.append(f"{m} is not installed")
            elif backend == "cuda" and m in PROBES:
                why = PROBES[m]()
                if why:
                    out.append(why)
        return out


def _why_no_torch() -> Optional[str]:
    from pipeline.gpu.device import why_no_torch
    return why_no_torch()


# needs that an import alone does not answer on the GPU backend: name -> a probe (None: usable)
PROBES = {"torch": _why_no_torch}


_BY_MODEL: Dict[str, "Registry"] = {}


class Registry:
    """The variants of one model, in the order a report lists them; ``paper`` names the variant that
    is the paper's own method (the run's last line compares the fastest with it)."""

    def __init__(self, model: str, variants: Iterable[VariantInfo], cpu_default: Optional[str] = None,
                 paper: Optional[str] = None, gpu_default: Optional[str] = None):
        self.model = model
        self.variants = {v.name: v for v in variants}
        cpu = [v.name for v in self.variants.values() if v.runs_on("cpu")]
        self.cpu_default = cpu_default or (cpu[0] if cpu else None)
        for what, name in (("paper", paper), ("gpu_default", gpu_default)):
            if name is not None and name not in self.variants:
                raise ValueError(f"registry {model}: {what} variant {name!r} is not one of its variants")
        self.paper = paper
        self.gpu_default = gpu_default or paper     # what a GPU run falls back to
        _BY_MODEL[model] = self

    def __contains__(self, name: str) -> bool:
        return name in self.variants

    def __getitem__(self, name: str) -> VariantInfo:
        return self.variants[name]

    def names(self, backend: Optional[str] = None, kind: Optional[str] = None) -> List[str]:
        return [v.name for v in self.variants.values()
                if (backend is None or v.runs_on(backend)) and (kind is None or v.kind == kind)]

    def __repr__(self) -> str:
        return f"Registry({self.model!r})"

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
    needs are usable (an optional package missing, or PyTorch without a GPU, is skipped with a
    notice). When none of the requested variants runs here: on the CPU backend the registry's CPU
    default (the NumPy reference), on the GPU its paper variant; when baselines were requested and
    none runs on the CPU, the registry's CPU baselines. Every change is explained in ``notes`` (the
    caller passes them to ``ctx.notice``)."""
    asked = registry.check(cfg)
    notes: List[str] = []

    def usable(names: Sequence[str], what: str) -> List[str]:
        out = []
        for n in names:
            info = registry[n]
            if not info.runs_on(backend):
                continue
            miss = info.missing(backend)
            if miss:
                notes.append(f"{what} {n!r} skipped: {'; '.join(miss)}")
                continue
            if n not in out:
                out.append(n)
        return out

    ours = usable(asked, "variant")
    if not ours:
        fallback = registry.cpu_default if backend == "cpu" else registry.gpu_default
        if fallback is None or not registry[fallback].runs_on(backend):
            raise ConfigError(f"none of {', '.join(asked)} runs on the {backend} backend for "
                              f"model={registry.model}: choose from {', '.join(registry.names(backend))}")
        ours = [fallback]
        if backend == "cpu":
            notes.append(f"CPU backend: {', '.join(asked)} {'needs' if len(asked) == 1 else 'need'} a GPU; "
                         f"running {fallback!r} (the NumPy reference) instead")
        else:
            notes.append(f"{', '.join(asked)} {'runs' if len(asked) == 1 else 'run'} on the CPU backend; on the GPU "
                         f"running {fallback!r}"
                         + (" (the paper's variant)" if fallback == registry.paper else ""))
    requested = [str(b) for b in cfg.model.baselines]
    baselines = [b for b in usable(requested, "baseline") if b not in ours]
    skipped = [b for b in requested if not registry[b].runs_on(backend)]
    if backend == "cpu" and requested and not baselines:
        baselines = [b for b in registry.names("cpu", BASELINE) if b not in ours]
        if baselines:
            notes.append(f"CPU backend: comparing with {', '.join(baselines)} instead of {', '.join(requested)}")
            skipped = []
    if skipped:
        notes.append(f"{backend.upper()} backend: baseline(s) {', '.join(skipped)} not run here")
    return Selection(ours, baselines, notes)


def of_model(name: str) -> Optional[Registry]:
    """The registry of ``model.name`` (once the model's variants module is imported), else None."""
    return _BY_MODEL.get(name)


def all_registries() -> List[Registry]:
    """Every registry made so far, in the order made."""
    return list(_BY_MODEL.values())
