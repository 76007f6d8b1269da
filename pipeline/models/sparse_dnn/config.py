"""Schema and checks for model=sparse_dnn (SNIG on the HPEC Sparse DNN Challenge)."""
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List

from omegaconf import OmegaConf

from pipeline.config import DatasetConf, ModelConf, knob, preset_key, require, store, validator, with_small

SIZES = (1024, 4096, 16384, 65536)
FORMATS = ("npz", "tsv", "radixnet")
INPUTS = ("mnist", "random")


@dataclass
class SparseDnnDatasetConf(DatasetConf):
    """One network + its inputs: the packaged official npz, the official TSV files, or RadiX-Net."""
    name: str = "hpec-1024"
    kind: str = "real"                 # real | synthetic
    path: str = ""                     # folder (npz: holds weights.npz ...; tsv: holds the challenge files)
    format: str = "npz"                # npz | tsv | radixnet
    neurons: int = 1024                # N
    layers: int = 120                  # L (a prefix of the network's layers)
    images: int = 0                    # 0: every image the source has (npz: 1200, else 60000)
    bias: float = 0.0                  # 0: the paper's Table 1 value for N
    ymax: float = 32.0
    inputs: str = "mnist"              # radixnet only: mnist (resized + binarized) | random
    golden: str = ""                   # tsv only: categories file name ('' = neuron{N}-l{L}-categories.tsv)
    keep_layers_gb: float = 2.0        # radixnet: layers up to this many GB (as CSR) are kept as a list; larger
                                       # networks are regenerated on demand for each pass (never all held)


@dataclass
class SparseDnnConf(ModelConf):
    TOP_LEVEL_HINTS: ClassVar[Dict[str, str]] = {
        "block_size": "its kernel block is model.block=[dim_x, dim_y] (paper: [2, 512])",
        "epochs": "it runs inference; the timed passes are model.repeats"}
    batch_size: int = field(default=0, metadata={"zero_ok": True})   # images per batch on the GPU; 0 = all in one batch
    weight_buffers: int = 2            # nb: device weight buffers the layers stream through
    num_secs: int = 0                  # output sections per row; 0 = from the device's shared memory
    smem_optin: bool = True            # allow > 48 KB dynamic shared memory (Hopper: ~227 KB)
    block: List[int] = field(default_factory=lambda: [2, 512])   # (dim_x, dim_y) of the snig kernel
    rows_per_block: int = 1            # snig: rows sharing one block's weight reads (1 = the paper's kernel)
    pull_neurons_per_warp: int = 4     # pull: output neurons a warp computes per 128-image work item
    graph: bool = True                 # capture the per-batch pass as a CUDA graph (fallback: streams)
    gpus: int = 1                      # 1: in-process; 0: every GPU present; n: n GPUs, one worker process each
    repeats: int = 3                   # timed passes per variant (median reported)
    warmup: int = 1
    saturation_shortcut: bool = True   # reference: skip rows that are provably saturated (exact)
    budget_s: float = 420.0            # wall seconds per network (its preparation included) after which no further
                                       # warm-up/repeat pass or baseline is started (0 = no limit); only huge
                                       # networks (65536 x 1920: ~2 min a pass) ever reach it
    grid: List[Any] = field(default_factory=list)   # [[N, L], ...]: run each cell (snig_table3)
    paper: Any = None                  # the paper's Table 3 numbers (experiment config)


store("model", "schema_sparse_dnn", SparseDnnConf)
store("dataset", "schema_sparse_dnn_dataset", SparseDnnDatasetConf)


@validator("sparse_dnn")
def _check(cfg) -> None:
    m, d = cfg.model, cfg.dataset
    _check_dataset(d)
    if d.small:        # the size=small preset's values pass the same checks, named dataset.small.<key>
        _check_dataset(with_small(d), set(d.small))
    require(int(m.batch_size) >= 0, knob(cfg, "batch_size"), m.batch_size, "0 (one batch) or a positive integer")
    require(int(m.weight_buffers) >= 1, "model.weight_buffers", m.weight_buffers, "at least 1")
    require(int(m.num_secs) >= 0, "model.num_secs", m.num_secs, "0 (auto) or a positive integer")
    if int(m.num_secs) > 0:
        require(int(d.neurons) % int(m.num_secs) == 0, "model.num_secs", m.num_secs,
                f"a divisor of dataset.neurons={d.neurons}")
    blk = list(m.block)
    require(len(blk) == 2 and all(int(b) > 0 for b in blk) and int(blk[0]) * int(blk[1]) <= 1024,
            "model.block", blk, "[dim_x, dim_y] with dim_x*dim_y <= 1024")
    require(1 <= int(m.rows_per_block) <= 8, "model.rows_per_block", m.rows_per_block, "1..8")
    require(1 <= int(m.get("pull_neurons_per_warp", 4)) <= 64, "model.pull_neurons_per_warp",
            m.get("pull_neurons_per_warp"), "1..64")
    require(int(m.repeats) >= 1, "model.repeats", m.repeats, "at least 1")
    require(int(m.warmup) >= 0, "model.warmup", m.warmup, "0 or a positive number of untimed passes")
    require(float(m.get("budget_s", 0)) >= 0, "model.budget_s", m.get("budget_s"), "0 (no limit) or seconds")
    require(int(m.gpus) >= 0, "model.gpus", m.gpus, "0 (every GPU present), 1 (in-process) or a GPU count")
    for cell in list(m.grid):
        require(_grid_cell_ok(cell), "model.grid", list(cell) if OmegaConf.is_list(cell) else cell,
                f"[N, L] with N in {SIZES}")


def _check_dataset(d, small=()) -> None:
    key = preset_key("dataset", small)
    require(str(d.get("format")) in FORMATS, key("format"), d.get("format"), f"one of {', '.join(FORMATS)}")
    require(int(d.neurons) > 0, key("neurons"), d.neurons, "a positive integer")
    if d.format == "radixnet":
        require(int(d.neurons) in SIZES, key("neurons"), d.neurons, f"one of {SIZES} for RadiX-Net")
        require(str(d.inputs) in INPUTS, key("inputs"), d.inputs, f"one of {', '.join(INPUTS)}")
    stand_ins = tuple(i for i in INPUTS if i != "mnist")
    require(str(d.fallback or "") in ("",) + stand_ins, key("fallback"), d.fallback,
            f"'' (MNIST or fail) or {', '.join(stand_ins)} (RadiX-Net inputs when MNIST is not in data_dir)")
    require(int(d.layers) > 0, key("layers"), d.layers, "a positive integer")
    require(int(d.images) >= 0, key("images"), d.images, "0 (all) or a positive integer")
    require(float(d.ymax) > 0, key("ymax"), d.ymax, "a positive number")
    require(float(d.keep_layers_gb) >= 0, key("keep_layers_gb"), d.keep_layers_gb,
            "0 (always regenerate) or a positive number of GB")


def _grid_cell_ok(cell) -> bool:
    """A cell of model.grid is a list [N, L] of integers, N a RadiX-Net size, L > 0."""
    try:
        return OmegaConf.is_list(cell) and len(cell) == 2 and int(cell[0]) in SIZES and int(cell[1]) > 0
    except (TypeError, ValueError):
        return False
