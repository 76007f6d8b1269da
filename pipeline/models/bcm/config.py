"""Schema and checks for model=bcm."""
from dataclasses import dataclass, field
from typing import ClassVar, Dict, List

from pipeline.config import ModelConf, check_no_dataset, is_pow2, knob, require, store, validator
from pipeline.models.bcm.variants import REGISTRY

KINDS = ("fc", "conv")


@dataclass
class LayerShape:
    type: str = "fc"       # fc: out x inp | conv: 3x3, stride 1, padding 1, h x w x c -> cout
    out: int = 0
    inp: int = 0
    h: int = 0
    w: int = 0
    c: int = 0
    cout: int = 0


@dataclass
class BcmConf(ModelConf):
    TOP_LEVEL_HINTS: ClassVar[Dict[str, str]] = {
        "epochs": "it times single layers (forward + both gradients) and trains nothing; "
                  "model=bcm_cnn trains a BCM network"}
    block_size: int = 64                                    # k (paper Table 3: 16, 32, 64)
    batch_size: int = 128                                   # paper Table 3: 128 (layer B: 64)
    layers: List[str] = field(default_factory=lambda: ["A"])             # names of model.shapes
    shapes: Dict[str, LayerShape] = field(default_factory=dict)          # paper Table 3: A, B, C
    block_sizes: List[int] = field(default_factory=list)


store("model", "schema_bcm", BcmConf)


def check_block_sizes(cfg, lo: int, hi: int, why: str = "", small=()):
    """Every block size of a BCM model config (``model.block_sizes``, else ``block_size``) is a power
    of two in [lo, hi]; shared by model=bcm and model=bcm_cnn. Named ``model.small.<key>`` when
    ``small`` (the size=small preset's keys) has the key. Returns (that name, the block sizes)."""
    m = cfg.model
    name = "block_sizes" if list(m.block_sizes) else "block_size"
    key = f"model.small.{name}" if name in small else knob(cfg, name)     # block_sizes: model.block_sizes
    ks = list(m.block_sizes) or [m.block_size]
    for k in ks:
        require(is_pow2(k), key, k, "a power of two (e.g. 16, 32, 64)")
        require(lo <= k <= hi, key, k, f"between {lo} and {hi}{why}")
    return key, ks


@validator("bcm")
def _check(cfg) -> None:
    m = cfg.model
    key, ks = check_block_sizes(cfg, 4, 256)
    require(int(m.batch_size) > 0, knob(cfg, "batch_size"), m.batch_size, "a positive integer")
    shapes = ", ".join(m.shapes)
    require(len(m.layers) > 0, "model.layers", list(m.layers), f"a non-empty list of layers of model.shapes ({shapes})")
    for name in m.layers:
        require(name in m.shapes, "model.layers", name, f"a layer of model.shapes ({shapes})")
    for name, s in m.shapes.items():
        require(s.type in KINDS, f"model.shapes.{name}.type", s.type, " or ".join(KINDS))
    check_no_dataset(cfg)
    names = REGISTRY.check(cfg)
    if "tiled" in names:
        for k in ks:
            require(k <= 64, key, k, "at most 64 for the tiled variant (k' x 16 threads a block)")
