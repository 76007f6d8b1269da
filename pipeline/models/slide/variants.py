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
