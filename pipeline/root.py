"""Where the project's own files are: the repository root and the folders the code reads from it.
The one module that locates them (from its own path), so no other module counts ``parents[...]``."""
from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT_ROOT / "conf"        # the Hydra configs (and conf/suite: the GPU suite's run lists)
CUDA_DIR = PROJECT_ROOT / "cuda"        # the kernels' sources
DATA_DIR = PROJECT_ROOT / "data"        # data shipped with or fetched into the repository
OUTPUTS_DIR = PROJECT_ROOT / "outputs"  # runs, the MLflow store, caches
