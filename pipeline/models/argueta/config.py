"""Schemas and checks for model=fewhot (N-hot lookup C = A B) and model=softmax_topn (fused
softmax + top-N), after Argueta & Chiang."""
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List

from pipeline.config import ModelConf, check_no_dataset, is_pow2, require, store, validator

_NO_TRAINING = "it times one kernel call per case and trains nothing"


@dataclass
class FewhotConf(ModelConf):
    TOP_LEVEL_HINTS: ClassVar[Dict[str, str]] = {
        "batch_size": "its minibatch is model.rows (L)", "epochs": _NO_TRAINING,
        "block_size": "its threads per block are chosen from L and M; it has no block-size setting"}
    rows: int = 100                  # L: minibatch rows of A
    vocab: int = 10240               # K: columns of A = rows of B
    width: int = 512                 # M: columns of B (embedding width)
    n_hot: List[int] = field(default_factory=lambda: [5])   # N: non-zeros per row of A, one case each
    paper: Dict[str, Any] = field(default_factory=dict)    # paper's times (ms) per GPU and method


@dataclass
class TopnConf(ModelConf):
    TOP_LEVEL_HINTS: ClassVar[Dict[str, str]] = {
        "block_size": "its threads per block are model.block_size (paper: 256); write model.block_size={value}",
        "batch_size": "its rows are model.rows (L, a list)", "epochs": _NO_TRAINING}
    rows: List[int] = field(default_factory=lambda: [512])  # L: rows (one case each)
    vocab: int = 10240               # K: logits per row
    top_n: List[int] = field(default_factory=lambda: [10])  # N: beam width (one case each)
    block_size: int = 256            # threads per block of topn_atomic / topn_early_exit (paper: 256)
    split: int = 0                   # blocks per row for topn_split (0: enough to fill the GPU)
    vec: int = 0                     # float4 loads per thread of topn_bucket: 1, 2, 4 or 8 (0: chosen from L, K, N)
    paper: Dict[str, Any] = field(default_factory=dict)


store("model", "schema_fewhot", FewhotConf)
store("model", "schema_softmax_topn", TopnConf)


@validator("fewhot")
def _check_fewhot(cfg) -> None:
    m = cfg.model
    for key in ("rows", "vocab", "width"):
        require(int(m[key]) > 0, f"model.{key}", m[key], "a positive integer")
    require(len(m.n_hot) > 0, "model.n_hot", list(m.n_hot), "a non-empty list of non-zeros per row")
    for n in m.n_hot:
        require(0 < int(n) <= int(m.vocab), "model.n_hot", n, f"between 1 and model.vocab ({m.vocab})")
    check_no_dataset(cfg)


@validator("softmax_topn")
def _check_topn(cfg) -> None:
    m = cfg.model
    require(int(m.vocab) > 0, "model.vocab", m.vocab, "a positive integer")
    require(len(m.rows) > 0 and all(int(r) > 0 for r in m.rows), "model.rows", list(m.rows),
            "a non-empty list of positive row counts")
    require(len(m.top_n) > 0, "model.top_n", list(m.top_n), "a non-empty list of beam widths")
    for n in m.top_n:
        require(0 < int(n) <= min(int(m.vocab), 1024), "model.top_n", n,
                f"between 1 and min(model.vocab, 1024) = {min(int(m.vocab), 1024)}")
    require(is_pow2(int(m.block_size)) and 32 <= int(m.block_size) <= 1024, "model.block_size",
            m.block_size, "a power of two between 32 and 1024 (a whole number of warps)")
    require(int(m.split) >= 0, "model.split", m.split, "0 (automatic) or a positive number of blocks per row")
    require(int(m.vec) in (0, 1, 2, 4, 8), "model.vec", m.vec,
            "0 (automatic) or 1, 2, 4, 8 float4 loads per thread of topn_bucket")
    check_no_dataset(cfg)
