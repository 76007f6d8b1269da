"""Where datasets are found: ``data_dir`` (config key; env ``PIPELINE_DATA_DIR``) first, then the
small real datasets shipped in the project's ``data/`` folder."""
from __future__ import annotations

from pathlib import Path

from pipeline.errors import DataError
from pipeline.root import DATA_DIR

SHIPPED = DATA_DIR


def find(cfg, name: str, hint: str = "") -> Path:
    """The folder of dataset ``name``; a one-line DataError naming where it looked otherwise."""
    tried = []
    for root in (Path(str(cfg.data_dir)), SHIPPED):
        p = root / name
        if str(p) in tried:      # data_dir defaults to the shipped folder
            continue
        tried.append(str(p))
        if p.is_dir():
            return p
    raise DataError(f"dataset '{name}' not found (looked in {', '.join(tried)}); set data_dir=... or "
                    f"PIPELINE_DATA_DIR to the folder that holds '{name}/'" + (f" ({hint})" if hint else ""))
