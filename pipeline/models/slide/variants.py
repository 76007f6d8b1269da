"""The variants of model=slide (plain data: read by the config checks, the model and its GPU code)."""
from pipeline.registry import BASELINE, OURS, Registry, VariantInfo

REGISTRY = Registry("slide", [
    VariantInfo("slide", OURS, "cuda", "LSH-sampled sparse training on the GPU (hash, tables, query, "
                "fused active-set softmax, lazy or dense Adam)"),
    VariantInfo("cpu", OURS, "cpu", "the NumPy reference of the same algorithm (small presets)"),
    VariantInfo("dense_fp32", BASELINE, "cuda", "full softmax over every label, same Adam, cuBLAS fp32 (CuPy)"),
    VariantInfo("dense_tf32", BASELINE, "cuda", "full softmax over every label, same Adam, cuBLAS TF32 (CuPy)"),
    VariantInfo("torch", BASELINE, "cuda", "PyTorch dense full softmax, TF32", needs=("torch",)),
    VariantInfo("cpu_dense", BASELINE, "cpu", "NumPy dense full softmax, same Adam"),
], cpu_default="cpu", paper="slide")

HIDDEN_STEP, HIDDEN_MAX = 32, 256     # the CUDA kernels take hidden widths in multiples of 32 (registers: <= 256)
OPTIMIZERS = ("adam", "lazy_adam")    # adam: every parameter every step (the paper); lazy_adam: touched rows
HASHES = ("wta", "dwta")

# model.min_active unset (null): G-SLIDE's 1,500 (its setting for Amazon-670K and Wiki-325K, 0.2-0.5 % of
# their labels), or 5 % of the labels when that is fewer (SLIDE sets its output sparsity per dataset), at
# least 32 (Bibtex, 159 labels: 32 gave P@1 0.50 against dense's 0.54 on the CPU preset, 8 gave 0.43),
# and never more than half the labels: a dataset with fewer labels than 1,500 still samples
MIN_ACTIVE_DEFAULT, MIN_ACTIVE_FRACTION, MIN_ACTIVE_FLOOR = 1500, 0.05, 32
INT32_LIMIT = 2 ** 31                 # table offsets and ids are int32 on the GPU


def default_min_active(n_labels: int) -> int:
    """min_active when model.min_active is unset: min(1500, max(32, ceil(5 % of N)), ceil(N / 2)) for N
    labels (1,500 from 30,000 labels; 250 at 5,000; 50 at 983; 32 at 159), at least 1."""
    n = int(n_labels)
    return max(1, min(MIN_ACTIVE_DEFAULT, max(MIN_ACTIVE_FLOOR, -(-n * 5 // 100)), -(-n // 2)))


def code_bits(bin_size: int) -> int:
    """Bits of one WTA code: ceil(log2(bin_size)), at least 1."""
    return max(1, (int(bin_size) - 1).bit_length())


def table_segments(K: int, L: int, bin_size: int) -> int:
    """Buckets of the L tables together: L * 2^(K * bits)."""
    return int(L) << (int(K) * code_bits(bin_size))


def table_bytes(K: int, L: int, bin_size: int, n_labels: int = 0) -> int:
    """Device memory the hash tables take at their peak (a rebuild; pipeline/models/slide/gpu.py): per
    bucket the int32 offsets and the rebuild's three int32 bounds (16 B), per (table, label) the int32
    id, the uint64 sort key and the sort's copy of it (20 B). ``n_labels`` 0: the bucket part only."""
    return 16 * table_segments(K, L, bin_size) + 4 + 20 * int(L) * int(n_labels)


def gb(nbytes: float) -> str:
    """Bytes as GB with 3 significant digits (1.23 GB; 859 GB)."""
    return f"{nbytes / 1e9:.3g} GB"
