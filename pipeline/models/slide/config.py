"""Schema and checks for model=slide (SLIDE: LSH-sampled softmax training)."""
from dataclasses import dataclass, field
from typing import ClassVar, Dict, List, Optional

from pipeline.config.xc import check_xc_dataset
from pipeline.config import ModelConf, is_pow2, preset_key, require, store, validator, with_small
from pipeline.models.slide.variants import (HASHES, HIDDEN_MAX, HIDDEN_STEP, INT32_LIMIT, OPTIMIZERS,
                                            code_bits, gb, table_bytes, table_segments)


@dataclass
class SlideConf(ModelConf):
    TOP_LEVEL_HINTS: ClassVar[Dict[str, str]] = {
        "block_size": "its hash tables are model.K, model.L and model.bin_size; it has no block size"}
    hidden: int = 128
    K: int = 6                    # hash codes per table
    L: int = 50                   # tables
    bin_size: int = 8             # WTA window (a power of two)
    hash: str = "wta"             # wta | dwta
    bucket_capacity: int = 128
    threshold: int = 1
    min_active: Optional[int] = None  # null: from the labels (variants.default_min_active)
    max_active: int = 0           # 0: from the data
    rebuild_every: int = 6400     # samples (0: never)
    rebuild_decay: float = 1.0
    reshuffle_every: int = 128000 # samples (0: never)
    optimizer: str = "lazy_adam"  # adam | lazy_adam
    lr: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    init_std: float = 0.01
    batch_size: int = 256
    epochs: int = 3
    shuffle: bool = False
    max_steps: int = 0            # steps per epoch at most (0: all)
    eval_batch: int = 4096
    eval_rows: int = 0            # test rows evaluated (0: all; else a seeded random subset, every variant the same)
    eval_every: int = 0           # evaluate every this many training steps (0: once an epoch)
    p1_target: float = 0.0        # time_to_p1's target P@1 (0: the dense TF32 baseline's after its first epoch)
    topk: List[int] = field(default_factory=lambda: [1, 5])
    tolerance: float = 1e-3


store("model", "schema_slide", SlideConf)


@validator("slide")
def _check(cfg) -> None:
    _check_model(cfg.model, labels=_labels(cfg, small=False))
    if cfg.model.small:
        _check_model(with_small(cfg.model), set(cfg.model.small), labels=_labels(cfg, small=True))
    check_xc_dataset(cfg, model="slide")


def _labels(cfg, small: bool) -> int:
    """The label count a run of these settings trains on, when the config says it (0: read from the
    files' header later): the generator's small preset on size=small, else ``dataset.labels``."""
    d = cfg.dataset
    generated = str(d.get("kind", "")) != "real" and not str(d.get("path", "") or "")
    n = (with_small(d) if small and generated else d).get("labels", 0)
    try:
        return max(0, int(n or 0))
    except (TypeError, ValueError):
        return 0


def check_tables(K: int, L: int, bin_size: int, n_labels: int, key_K: str = "model.K", key_L: str = "model.L") -> None:
    """One-line ConfigError when the L hash tables cannot exist: more buckets (L * 2^(K * bits)) or
    (table, label) entries (L * N) than int32 offsets index; the message says the bytes they would
    need. ``n_labels`` 0: unknown (the bucket part only). Within these limits the tables stay under
    about 77 GB; whether they fit the device is checked once it is known (SlideModel.prepare)."""
    bits = code_bits(bin_size)
    nseg = table_segments(K, L, bin_size)
    need = gb(table_bytes(K, L, bin_size, n_labels))
    require(nseg < INT32_LIMIT, key_K, K,
            f"L x 2^(K*bits) buckets < 2^31 (int32 table offsets); here {L} x 2^{K * bits} = {nseg:,} buckets, "
            f"whose tables would need {need}; lower {key_K} or {key_L}")
    require(L * n_labels < INT32_LIMIT, key_L, L,
            f"L x labels < 2^31 (int32 table ids); here {L} x {n_labels:,} = {L * n_labels:,}, whose tables would "
            f"need {need}; lower {key_L}")


def _check_model(m, small=(), labels: int = 0) -> None:
    key = preset_key("model", small)

    bits = code_bits(m.bin_size)
    require(m.hidden % HIDDEN_STEP == 0 and HIDDEN_STEP <= m.hidden <= HIDDEN_MAX, key("hidden"), m.hidden,
            f"a multiple of {HIDDEN_STEP} in {HIDDEN_STEP}..{HIDDEN_MAX} (the CUDA kernels' widths; paper: 128)")
    require(m.K >= 1, key("K"), m.K, "a positive number of codes per table")
    require(m.L >= 1, key("L"), m.L, "a positive number of tables")
    require(is_pow2(m.bin_size) and 2 <= m.bin_size <= m.hidden, key("bin_size"), m.bin_size,
            f"a power of two in 2..model.hidden ({m.hidden})")
    require(m.K * bits <= 30, key("K"), m.K, f"K * log2(bin_size) <= 30 bits a bucket id (here {m.K * bits})")
    if m.L >= 1:
        check_tables(m.K, m.L, m.bin_size, labels, key("K"), key("L"))
    require(m.hash in HASHES, key("hash"), m.hash, " or ".join(HASHES))
    require(m.bucket_capacity >= 1, key("bucket_capacity"), m.bucket_capacity, "a positive integer")
    require(1 <= m.threshold <= m.L, key("threshold"), m.threshold, f"1..model.L ({m.L})")
    require(m.min_active is None or m.min_active >= 0, key("min_active"), m.min_active,
            "null (from the label count) or a non-negative integer")
    require(m.max_active >= 0, key("max_active"), m.max_active, "0 (from the data) or a positive integer")
    require(m.max_active == 0 or m.min_active is None or m.min_active <= m.max_active, key("min_active"),
            m.min_active, f"<= max_active ({m.max_active}) when that is set")
    require(m.rebuild_every >= 0, key("rebuild_every"), m.rebuild_every, "samples >= 0 (0: never)")
    require(m.rebuild_decay >= 1.0, key("rebuild_decay"), m.rebuild_decay, ">= 1.0 (1: a fixed period)")
    require(m.reshuffle_every >= 0, key("reshuffle_every"), m.reshuffle_every, "samples >= 0 (0: never)")
    require(m.optimizer in OPTIMIZERS, key("optimizer"), m.optimizer, " or ".join(OPTIMIZERS))
    require(m.lr > 0, key("lr"), m.lr, "a positive learning rate")
    require(0 <= m.beta1 < 1, key("beta1"), m.beta1, "in [0, 1)")
    require(0 <= m.beta2 < 1, key("beta2"), m.beta2, "in [0, 1)")
    require(m.eps > 0, key("eps"), m.eps, "a positive number")
    require(m.init_std > 0, key("init_std"), m.init_std, "a positive standard deviation")
    require(m.batch_size > 0, key("batch_size"), m.batch_size, "a positive integer")
    require(m.epochs > 0, key("epochs"), m.epochs, "a positive integer")
    require(m.max_steps >= 0, key("max_steps"), m.max_steps, "0 (whole epochs) or a positive number of steps")
    require(m.eval_batch > 0, key("eval_batch"), m.eval_batch, "a positive number of rows")
    require(m.eval_rows >= 0, key("eval_rows"), m.eval_rows, "0 (all) or a positive number of rows")
    require(m.eval_every >= 0, key("eval_every"), m.eval_every, "0 (once an epoch) or a positive number of steps")
    require(0 <= m.p1_target <= 1, key("p1_target"), m.p1_target,
            "a P@1 in (0, 1], or 0 (the dense TF32 baseline's P@1 after its first epoch)")
    require(len(m.topk) > 0 and all(k >= 1 for k in m.topk), key("topk"), list(m.topk),
            "a non-empty list of positive k")
    require(m.tolerance > 0, key("tolerance"), m.tolerance, "a positive number")
