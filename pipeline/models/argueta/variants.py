"""The variants of model=fewhot and model=softmax_topn (Argueta & Chiang), in one place: the config
checks, the model and its GPU code all read these names (this module imports nothing of the
model's code)."""
from pipeline.registry import BASELINE, OURS, Registry, VariantInfo

FEWHOT = Registry("fewhot", [
    VariantInfo("fewhot", OURS, "cuda", "the paper's N-hot lookup kernel (Algorithm 2, corrected)"),
    VariantInfo("fewhot_vec", OURS, "cuda", "a 1-D block per row slice, float4 loads and stores over M"),
    VariantInfo("cusparse", BASELINE, "cuda", "cuSPARSE SpMM"),
    VariantInfo("dense_fp32", BASELINE, "cuda", "dense cuBLAS SGEMM"),
    VariantInfo("cpu", OURS, "cpu", "NumPy gather + reduceat (the paper's algorithm)"),
    VariantInfo("cpu_sparse", BASELINE, "cpu", "SciPy CSR @ dense"),
    VariantInfo("cpu_dense", BASELINE, "cpu", "NumPy dense matmul"),
], cpu_default="cpu", paper="fewhot")

TOPN = Registry("softmax_topn", [
    VariantInfo("topn_atomic", OURS, "cuda", "the paper's fused softmax + top-N (Algorithm 4, corrected)"),
    VariantInfo("topn_early_exit", OURS, "cuda", "the paper's kernel with an early exit"),
    VariantInfo("topn_split", OURS, "cuda", "several blocks per row (radix select per chunk) + a merge kernel"),
    VariantInfo("topn_radix", OURS, "cuda", "the row in shared memory, MSB-first radix select, bitonic sort of N"),
    VariantInfo("topn_bucket", OURS, "cuda", "the row read once into registers: softmax normaliser in the same pass, "
                "a bound on the N-th key from the thread maxima (two 8-bit histogram passes), only the few "
                "candidates above it ranked"),
    VariantInfo("softmax_topk", BASELINE, "cuda", "CuPy softmax + sort"),
    VariantInfo("torch_topk", BASELINE, "cuda", "PyTorch softmax + topk", needs=("torch",)),
    VariantInfo("online_topk", BASELINE, "cuda", "online-normalizer softmax + register top-k built for k = N"),
    VariantInfo("online_topk_fixed", BASELINE, "cuda", "online-normalizer softmax + top-k built once for k = 400"),
    VariantInfo("cpu", OURS, "cpu", "NumPy select on packed keys"),
    VariantInfo("cpu_sort", BASELINE, "cpu", "NumPy softmax + full sort"),
], cpu_default="cpu", paper="topn_atomic")
