"""Schemas and checks for model=wide_lr and model=wide_fm (cuWide) and their datasets."""
from dataclasses import dataclass, field
from typing import ClassVar, Dict, List, Optional

from omegaconf import MISSING

from pipeline.config import DatasetConf, ModelConf, is_pow2, knob, preset_key, require, store, validator, with_small
from pipeline.data.ctr import FORMATS as CLICK_LOGS, layout_of   # criteo, avazu, csv: the click-log reader
from pipeline.models.wide.variants import (HOT_CACHE_SMEM_MAX, caches_hot_accumulators, hot_cache_bytes,
                                           resolved_optimizer)

UPDATES = ("chunk", "batch")
OPTIMIZERS = ("auto", "sgd", "adagrad")
STOP_RULES = ("patience", "paper")
STOP_METRICS = ("val_loss", "val_auc")
BIAS_INITS = ("prior", "zero")
ADAGRAD_BIAS = ("prior", "lr")
DESIGNS = ("chunk", "warp")
FORMATS = ("svmlight", "synth") + CLICK_LOGS


@dataclass
class WarpConf:
    """model.warp: the geometry of flow's warp design (model.design=warp, ``cuda/wide/wide.cu:flow_warp``)."""
    samples: int = 1             # samples a warp trains per step (32 / this = lanes per sample)
    warps_per_block: int = 0     # 0 = the most (<= 8) that still puts a block on every SM
    edges_per_lane: int = 0      # edges per lane kept in registers (0: from the 99th pct row length)
    shards: int = 1              # copies of the hot parameter rows and the bias (spread atomics)
    shard_hot: int = 0           # most frequent features whose rows are sharded
    prefetch: int = 0            # steps ahead the edges are loaded (0: 2, or 1 for big FM rows)
    hot_cache: int = 0           # most frequent features whose rows each block caches in shared memory


@dataclass
class WideConf(ModelConf):
    TOP_LEVEL_HINTS: ClassVar[Dict[str, str]] = {
        "block_size": "its threads per block are model.threads (flow, design=chunk) or "
                      "model.warp.warps_per_block (design=warp)"}
    k: int = 0                   # FM factor size; 0 = logistic regression
    lr: float = 0.5              # SGD step (paper: 0.5 for LR)
    batch_size: int = 1024       # mini-batch (samples) of the strict-batch variants (paper: 1024)
    epochs: int = 100            # at most (the cap); early stopping ends sooner
    early_stop: bool = True      # stop early by stop_rule (false: train all `epochs`)
    stop_rule: str = "patience"  # patience (stop_metric no better for `patience` epochs) | paper (`window`)
    stop_metric: str = "val_loss"  # val_loss | val_auc: the metric of the patience rule and of keep_best
    patience: int = 5            # stop_rule=patience: epochs without improvement before stopping
    min_delta: float = 1e-4      # stop_rule=patience: the least change of stop_metric that counts as an improvement
    keep_best: bool = True       # end with the parameters of the best epoch by stop_metric (false: the last epoch's)
    window: int = 10
    chunk: int = 32              # samples per chunk (one thread block at a time)
    hot: int = 256               # most frequent features whose gradients are cached in shared memory
    replicas: int = 4            # copies of each per-sample accumulator (bank conflicts)
    threads: int = 256           # threads per block of the flow kernel
    blocks_per_sm: int = 4       # persistent blocks per SM (cap)
    inflight: int = 0            # flow, update=chunk: chunks in flight (0: inflight_batches mini-batches)
    inflight_batches: int = 1    # flow, update=chunk: mini-batches in flight when inflight = 0
    update: str = "chunk"        # flow: chunk (async per chunk, authors' code) | batch (paper's text)
    design: str = "chunk"        # flow kernel: chunk (a block per chunk, as the authors) | warp (a warp per sample(s))
    warp: WarpConf = field(default_factory=WarpConf)   # design=warp: the kernel's geometry
    shuffle: bool = True         # reshuffle chunk order every epoch
    init_std: float = 0.01       # FM factors ~ N(0, init_std^2), seeded
    bias_init: str = "prior"     # prior: the log-odds of the training labels | zero (paper)
    device_budget_mb: float = 0  # out-of-core when training data exceeds this (0: 60% of free memory)
    streams: int = 3             # buffers/streams of the out-of-core pipeline
    optimizer: str = "auto"      # flow, cpu: auto (adagrad where supported, else sgd) | sgd | adagrad; stage, torch: sgd
    adagrad_lr: float = 0.05     # adagrad: per-sample step before the per-coordinate scaling
    adagrad_bias: str = "prior"  # adagrad: the bias's SGD step: prior (lr / (4 r (1 - r)), r the positive share) | lr
    adagrad_init: float = 0.01   # adagrad: initial accumulator of squared gradients
    target_loss: Optional[float] = None   # time to quality: target validation loss (None: strict SGD's + margin)
    target_margin: float = 0.003 # time to quality: target = final val loss of strict mini-batch SGD + this
    evals_per_epoch: int = 1     # time to quality: validation evaluations an epoch (slices of the chunk order)


@dataclass
class DerivedConf:
    name: str = MISSING          # feature name (hashed as name=value)
    source: str = MISSING        # the column it is computed from
    kind: str = MISSING          # hour_of_day | weekday
    time_format: str = "%y%m%d%H"   # strptime format of the source column (Avazu's hour: YYMMDDHH)


@dataclass
class LayoutConf:
    """Columns of a raw click log (format criteo | avazu | csv); null keeps the format's value."""
    sep: Optional[str] = None                  # one character, or tab | comma | semicolon | space | pipe
    header: Optional[bool] = None              # the first line holds the column names
    columns: Optional[List[str]] = None        # the names ([]: the header's)
    label: Optional[str] = None                # the 0/1 label column
    numeric: Optional[List[str]] = None        # integer columns, bucketed by transform
    transform: Optional[str] = None            # log_squared (Criteo: v > 2 -> floor(ln(v)^2)) | identity
    categorical: Optional[List[str]] = None    # hashed as name=value; "*": every column no other role names
    ignore: Optional[List[str]] = None
    derived: Optional[List[DerivedConf]] = None
    quote: Optional[str] = None                # '' : no quoting


@dataclass
class WideDatasetConf(DatasetConf):
    format: str = "svmlight"     # svmlight | synth | criteo | avazu | csv
    train: str = ""              # file names inside the dataset folder
    val: str = ""
    features: int = 0            # declared dimension (0: from the data / the shape)
    shape: str = "criteo_s"      # synth: paper shape (criteo_s, kddb, url, kdd12)
    scale: float = 0.2           # synth: fraction of the paper's rows
    alpha: float = 1.1           # synth: power-law exponent of feature frequencies
    val_fraction: float = 0.1    # synth: held-out fraction (paper: 90/10)
    rows: int = 0                # real data: the first this-many training rows (0: all)
    layout: LayoutConf = field(default_factory=LayoutConf)   # criteo | avazu | csv: the columns


store("model", "schema_wide", WideConf)
store("dataset", "schema_wide_dataset", WideDatasetConf)


@validator("wide_lr")
@validator("wide_fm")
def _check(cfg) -> None:
    m = cfg.model
    require(m.k >= 0 and m.k <= 64, "model.k", m.k, "0 (LR) or an FM factor size 1..64")
    require(m.lr > 0, "model.lr", m.lr, "a positive step size")
    require(m.batch_size > 0, knob(cfg, "batch_size"), m.batch_size, "a positive integer")
    require(m.epochs > 0, knob(cfg, "epochs"), m.epochs, "a positive integer")
    require(m.window >= 1, "model.window", m.window, "a positive integer")
    require(m.stop_rule in STOP_RULES, "model.stop_rule", m.stop_rule,
            "patience (no better model.stop_metric for model.patience epochs) or paper (validation loss above "
            "the mean of the previous model.window epochs)")
    require(m.stop_metric in STOP_METRICS, "model.stop_metric", m.stop_metric, " or ".join(STOP_METRICS))
    pat = m.patience
    require(isinstance(pat, int) and not isinstance(pat, bool) and pat >= 1, "model.patience", pat,
            "a positive number of epochs")
    require(0 <= m.min_delta < float("inf"), "model.min_delta", m.min_delta,
            "a non-negative change of model.stop_metric (absolute)")
    require(m.bias_init in BIAS_INITS, "model.bias_init", m.bias_init,
            "prior (the log-odds of the training labels) or zero (the paper's)")
    require(m.adagrad_bias in ADAGRAD_BIAS, "model.adagrad_bias", m.adagrad_bias,
            "prior (model.lr / (4 r (1 - r)), r the share of positive labels) or lr (model.lr)")
    require(1 <= m.chunk <= 128, "model.chunk", m.chunk, "1..128 samples")
    require(m.hot >= 0, "model.hot", m.hot, "a non-negative number of features")
    require(is_pow2(m.replicas) and m.replicas <= 32, "model.replicas", m.replicas, "a power of two <= 32")
    require(is_pow2(m.threads) and 64 <= m.threads <= 1024, "model.threads", m.threads, "a power of two in 64..1024")
    require(m.threads >= m.chunk, "model.threads", m.threads, f">= model.chunk ({m.chunk})")
    require(1 <= m.blocks_per_sm <= 32, "model.blocks_per_sm", m.blocks_per_sm, "1..32")
    require(m.inflight >= 0, "model.inflight", m.inflight, "0 (model.inflight_batches) or a positive number of chunks")
    require(m.inflight_batches >= 1, "model.inflight_batches", m.inflight_batches, "a positive number of mini-batches")
    require(m["update"] in UPDATES, "model.update", m["update"], " or ".join(UPDATES))
    require(m.design in DESIGNS, "model.design", m.design, " or ".join(DESIGNS))
    w = m.warp
    require(is_pow2(w.samples) and w.samples <= 32, "model.warp.samples", w.samples, "a power of two <= 32")
    require(m.chunk % w.samples == 0, "model.warp.samples", w.samples, f"a divisor of model.chunk ({m.chunk})")
    require(0 <= w.warps_per_block <= 32, "model.warp.warps_per_block", w.warps_per_block, "0 (auto) or 1..32")
    require(0 <= w.edges_per_lane <= 32, "model.warp.edges_per_lane", w.edges_per_lane, "0 (auto) or 1..32")
    require(1 <= w.shards <= 32, "model.warp.shards", w.shards, "1 (none) .. 32")
    require(w.shard_hot >= 0, "model.warp.shard_hot", w.shard_hot, "a non-negative number of features")
    require(0 <= w.prefetch <= 4, "model.warp.prefetch", w.prefetch, "0 (auto) or 1..4 steps")
    require(0 <= w.hot_cache <= 8192 and w.hot_cache % 4 == 0, "model.warp.hot_cache", w.hot_cache,
            "0 (none) or a multiple of 4 up to 8192 features")
    opt = m.optimizer
    require(opt in OPTIMIZERS, "model.optimizer", opt, " or ".join(OPTIMIZERS))
    ahc = caches_hot_accumulators(m, resolved_optimizer(m))
    require(hot_cache_bytes(w.hot_cache, m.k, ahc) <= HOT_CACHE_SMEM_MAX, "model.warp.hot_cache", w.hot_cache,
            f"fewer rows: with k={m.k} its shared memory (the rows and their gradient"
            f"{', AdaGrad accumulators' if ahc else ''}) must fit in {HOT_CACHE_SMEM_MAX // 1024} KB")
    if opt == "adagrad":
        require(m["update"] == "chunk", "model.update", m["update"], "chunk (model.optimizer=adagrad steps per sample)")
        require(m.design == "warp", "model.design", m.design, "warp (model.optimizer=adagrad is in the warp kernel)")
    require(m.adagrad_lr > 0, "model.adagrad_lr", m.adagrad_lr, "a positive step size")
    require(m.adagrad_init >= 0, "model.adagrad_init", m.adagrad_init, "a non-negative accumulator")
    require(m.target_margin >= 0, "model.target_margin", m.target_margin, "a non-negative loss margin")
    tl = m.target_loss
    require(tl is None or tl > 0, "model.target_loss", tl, "null (strict SGD's final loss + model.target_margin) "
            "or a positive log loss")
    ev = m.evals_per_epoch
    require(isinstance(ev, int) and not isinstance(ev, bool) and ev >= 1, "model.evals_per_epoch", ev,
            "a positive integer (1: evaluate once an epoch)")
    require(m.init_std >= 0, "model.init_std", m.init_std, "a non-negative standard deviation")
    require(m.streams >= 1, "model.streams", m.streams, "a positive integer")
    require(m.device_budget_mb >= 0, "model.device_budget_mb", m.device_budget_mb,
            "0 (60% of free device memory) or a positive number of MB")
    d = cfg.dataset
    require("layout" in d, "dataset", d.name, "a wide dataset (a9a, criteo10k, avazu, ctr_synth) for model=" + m.name)
    _check_dataset(d)
    if d.get("small"):        # the size=small preset's values pass the same checks, named dataset.small.<key>
        _check_dataset(with_small(d), set(d.small))


def _check_dataset(d, small=()) -> None:
    key = preset_key("dataset", small)
    require(d.format in FORMATS, key("format"), d.format, f"one of {', '.join(FORMATS)} (dataset '{d.name}')")
    require(d.features >= 0, key("features"), d.features, "0 (from the data / the shape) or a positive dimension")
    require(d.rows >= 0, key("rows"), d.rows, "0 (all) or a positive number of rows")
    if d.format in CLICK_LOGS:
        layout_of(d)
        require(0 < d.val_fraction < 1, key("val_fraction"), d.val_fraction, "a fraction in (0, 1)")
    if d.format == "synth":
        from pipeline.data.ctr_synth import SHAPES
        require(not str(d.get("path") or ""), "dataset.path", d.get("path"),
                "'' for a generated dataset (format: synth); your own files: dataset=a9a dataset.path=FILE "
                "(svmlight) or a click-log dataset (docs/click-logs.md)")
        require(d.shape in SHAPES, key("shape"), d.shape, ", ".join(SHAPES))
        require(0 < d.scale <= 1, key("scale"), d.scale, "a fraction in (0, 1]")
        require(0 < d.val_fraction < 1, key("val_fraction"), d.val_fraction, "a fraction in (0, 1)")
        require(d.alpha > 0, key("alpha"), d.alpha, "a positive exponent")
