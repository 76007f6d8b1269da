"""The models: one package each (``pipeline/models/<m>/``: ``variants.py`` its registry,
``config.py`` its schema and checks, ``model.py`` its stages, its reference and GPU code).
:func:`register_all` registers the core schemas and every model's."""
from __future__ import annotations

import functools
import importlib
import pkgutil


@functools.cache
def register_all() -> None:
    """Register every schema with Hydra's ConfigStore and every model's variants (once)."""
    from pipeline import config
    config.register_core()
    for mod in pkgutil.iter_modules(__path__):
        if mod.ispkg:
            for part in ("variants", "config"):        # the registry, then the schema and checks
                importlib.import_module(f"{__name__}.{mod.name}.{part}")
    config.store_kernel_options()
