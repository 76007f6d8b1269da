"""Schema and checks for model=bcm_cnn (BCM CNN training, Dong et al. 2020 §4.5)."""
from dataclasses import dataclass, field
from typing import List

from pipeline.config import ModelConf, knob, register_variants, require, store, validator
from pipeline.config.bcm import check_block_sizes
from pipeline.models.bcm_cnn.variants import REGISTRY

DATASETS = ("cifar10", "mnist", "digits")


@dataclass
class BcmCnnConf(ModelConf):
    block_size: int = 32              # k: learns on every dataset offered (k=64 is larger than the digits network's layers)
    block_sizes: List[int] = field(default_factory=list)   # empty: [block_size]; one network per k
    batch_size: int = 128
    epochs: int = 3
    dense_baseline: bool = True       # also train the same network with dense layers, same job
    bcm: bool = True                  # train the BCM network(s)
    precision: str = "fp32"           # the dense layers' GEMMs on the GPU: fp32 | tf32
    lr: float = 0.02                  # SGD learning rate (linear warm-up, then cosine decay per step to 0)
    momentum: float = 0.9
    weight_decay: float = 5.0e-4
    clip_norm: float = 5.0            # clip the global gradient L2 norm (0: off)
    augment: bool = True              # CIFAR-10 only: random 4-pixel-shift crops + horizontal flips
    train_limit: int = 0              # use the first N training images after shuffling (0: all)
    test_limit: int = 0               # evaluate on the first N test images (0: all)
    eval_batch: int = 500
    min_accuracy: float = 0.0         # fail the run when a network's final test accuracy is below this


store("model", "schema_bcm_cnn", BcmCnnConf)
register_variants("bcm_cnn", REGISTRY)


@validator("bcm_cnn")
def _check(cfg) -> None:
    m = cfg.model
    check_block_sizes(cfg, 2, 64, " (the tiled kernel's limit)")
    require(cfg.dataset.name in DATASETS, "dataset", cfg.dataset.name, f"one of {', '.join(DATASETS)} for model=bcm_cnn")
    fallback = str(cfg.dataset.get("fallback", "") or "")
    require(fallback in ("",) + DATASETS, "dataset.fallback", fallback, f"'' or one of {', '.join(DATASETS)}")
    require(m.batch_size > 0, knob(cfg, "batch_size"), m.batch_size, "a positive integer")
    require(m.epochs > 0, knob(cfg, "epochs"), m.epochs, "a positive integer")
    require(m.precision in ("fp32", "tf32"), "model.precision", m.precision, "fp32 or tf32")
    require(m.lr > 0, "model.lr", m.lr, "a positive number")
    require(0 <= m.momentum < 1, "model.momentum", m.momentum, "in [0, 1)")
    require(m.clip_norm >= 0, "model.clip_norm", m.clip_norm, "a non-negative number (0: no clipping)")
    require(m.weight_decay >= 0, "model.weight_decay", m.weight_decay, "a non-negative number")
    require(m.train_limit >= 0, "model.train_limit", m.train_limit, "0 (all) or a positive integer")
    require(m.test_limit >= 0, "model.test_limit", m.test_limit, "0 (all) or a positive integer")
    require(m.eval_batch > 0, "model.eval_batch", m.eval_batch, "a positive integer")
    require(m.bcm or m.dense_baseline, "model.bcm", m.bcm, "true, or model.dense_baseline=true (nothing to train)")
    require(0.0 <= m.min_accuracy <= 1.0, "model.min_accuracy", m.min_accuracy, "in [0, 1]")
