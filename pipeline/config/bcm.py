"""Schema and checks for model=bcm."""
from dataclasses import dataclass, field
from typing import List

from pipeline.config import ModelConf, check_variants, is_pow2, require, store, validator

LAYERS = ("A", "B", "C")
# Our GPU variants of a BCM layer (pipeline/models/bcm/gpu.py), used by model=bcm and model=bcm_cnn.
BCM_VARIANTS = ("baseline", "o1", "o2", "fused", "tiled", "cgemm", "dft", "dft3m")


@dataclass
class BcmConf(ModelConf):
    block_size: int = 64
    batch_size: int = 128
    layers: List[str] = field(default_factory=lambda: ["A"])
    block_sizes: List[int] = field(default_factory=list)


store("model", "schema_bcm", BcmConf)


def check_block_sizes(m, lo: int, hi: int, why: str = "") -> None:
    """Every block size of a BCM model config (``block_sizes`` or ``block_size``) is a power of two
    in [lo, hi]; shared by model=bcm and model=bcm_cnn."""
    for k in list(m.block_sizes) or [m.block_size]:
        require(is_pow2(k), "block_size", k, "a power of two (e.g. 16, 32, 64)")
        require(lo <= k <= hi, "block_size", k, f"between {lo} and {hi}{why}")


@validator("bcm")
def _check(cfg) -> None:
    m = cfg.model
    check_block_sizes(m, 4, 256)
    for name in m.layers:
        require(name in LAYERS, "model.layers", name, f"one of {', '.join(LAYERS)}")
    from pipeline.models.bcm.model import BcmModel
    names = check_variants(cfg, BcmModel.GPU_VARIANTS + BcmModel.CPU_VARIANTS)
    if "tiled" in names:
        for k in list(m.block_sizes) or [m.block_size]:
            require(k <= 64, "block_size", k, "at most 64 for the tiled variant (k' x 16 threads a block)")
