"""Schema and checks for model=bcm_cnn (BCM CNN training, Dong et al. 2020 §4.5)."""
from dataclasses import dataclass, field
from typing import List

from omegaconf import OmegaConf

from pipeline.config import DatasetConf, ModelConf, knob, require, store, validator
from pipeline.models.bcm.config import check_block_sizes

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
    train_limit: int = 0              # use the first N training images after shuffling (0: dataset.train_images)
    test_limit: int = 0               # evaluate on N of the test images (0: dataset.test_images)
    eval_batch: int = 500
    min_accuracy: float = 0.0         # fail the run when a network's final test accuracy is below this


@dataclass
class ImageDatasetConf(DatasetConf):
    train_images: int = 0             # the first N training images after shuffling (0: all)
    test_images: int = 0              # a fixed class-balanced N of the test images (0: all)


store("model", "schema_bcm_cnn", BcmCnnConf)
store("dataset", "schema_image_dataset", ImageDatasetConf)


@validator("bcm_cnn")
def _check(cfg) -> None:
    small = cfg.model.small or {}
    _check_model(cfg)
    if small:      # the CPU preset's values pass the same checks, named model.small.<key>
        _check_model(OmegaConf.merge(cfg, {"model": OmegaConf.to_container(small)}), set(small))


def _check_model(cfg, small=()) -> None:
    m = cfg.model

    def key(k: str) -> str:
        return f"model.small.{k}" if k in small else knob(cfg, k)
    check_block_sizes(cfg, 2, 64, " (the tiled kernel's limit)", small)
    require(cfg.dataset.name in DATASETS, "dataset", cfg.dataset.name, f"one of {', '.join(DATASETS)} for model=bcm_cnn")
    fallback = str(cfg.dataset.get("fallback", "") or "")
    require(fallback in ("",) + DATASETS, "dataset.fallback", fallback, f"'' or one of {', '.join(DATASETS)}")
    require(m.batch_size > 0, key("batch_size"), m.batch_size, "a positive integer")
    require(m.epochs > 0, key("epochs"), m.epochs, "a positive integer")
    require(m.precision in ("fp32", "tf32"), key("precision"), m.precision, "fp32 or tf32")
    require(m.lr > 0, key("lr"), m.lr, "a positive number")
    require(0 <= m.momentum < 1, key("momentum"), m.momentum, "in [0, 1)")
    require(m.clip_norm >= 0, key("clip_norm"), m.clip_norm, "a non-negative number (0: no clipping)")
    require(m.weight_decay >= 0, key("weight_decay"), m.weight_decay, "a non-negative number")
    for k in ("train_limit", "test_limit"):
        require(m[k] >= 0, key(k), m[k], "0 (all) or a positive integer")
    for k in ("train_images", "test_images"):
        require(cfg.dataset.get(k, 0) >= 0, f"dataset.{k}", cfg.dataset.get(k), "0 (all) or a positive integer")
    require(m.eval_batch > 0, key("eval_batch"), m.eval_batch, "a positive integer")
    require(m.bcm or m.dense_baseline, key("bcm"), m.bcm, "true, or model.dense_baseline=true (nothing to train)")
    require(0.0 <= m.min_accuracy <= 1.0, key("min_accuracy"), m.min_accuracy, "in [0, 1]")
