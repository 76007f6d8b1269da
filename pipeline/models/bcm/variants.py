"""The variants of model=bcm, in one place: the config checks, the model and its GPU code all read
these names (this module imports nothing of the model's code). ``BCM_KERNELS`` are our GPU
implementations of a BCM layer, which model=bcm_cnn trains with too."""
from pipeline.registry import BASELINE, OURS, Registry, VariantInfo

BCM_KERNELS = (
    VariantInfo("baseline", OURS, "cuda", "the paper's five-operator flow: cuFFT, multiply into an intermediate, "
                                          "IFFT of every product, sum, reorder"),
    VariantInfo("o1", OURS, "cuda", "the paper's occupancy-first multiply + reduce-sum (IFFT after the sum)"),
    VariantInfo("o2", OURS, "cuda", "the paper's data-reuse-first multiply + reduce-sum"),
    VariantInfo("fused", OURS, "cuda", "the paper's Kernel Fusion: multiply and sum in one kernel, cuFFT around it"),
    VariantInfo("tiled", OURS, "cuda", "shared-memory tiled complex product over all frequencies"),
    VariantInfo("cgemm", OURS, "cuda", "a frequency-batched complex GEMM through cuBLAS"),
    VariantInfo("dft", OURS, "cuda", "our direct real-DFT kernels around one strided-batched complex GEMM"),
    VariantInfo("dft3m", OURS, "cuda", "dft with cuBLAS's 3M complex GEMM"),
    VariantInfo("rfft", OURS, "cuda", "dft with real FFTs in registers (one thread a row, k <= 64) and, for conv "
                                      "layers, the 3x3 window gathered inside the products (implicit im2col: "
                                      "spectra of x and g per pixel, col2im in the frequency domain); strict fp32"),
    VariantInfo("rfft_tf32", OURS, "cuda", "rfft with TF32 tensor-core complex GEMMs (opt-in: operands rounded "
                                           "to 10 mantissa bits, ~1e-3 relative error; conv products stay fp32)"),
)
BCM_KERNEL_NAMES = tuple(v.name for v in BCM_KERNELS)
PAPER = "fused"        # the paper's method (Kernel Fusion), timed by the default run beside the project's best
DENSE = ("dense_fp32", "dense_tf32")

REGISTRY = Registry("bcm", [
    *BCM_KERNELS,
    VariantInfo("dense_fp32", BASELINE, "cuda", "the same layer as a dense matrix, cuBLAS fp32"),
    VariantInfo("dense_tf32", BASELINE, "cuda", "the same layer as a dense matrix, cuBLAS TF32"),
    VariantInfo("cpu_fft", OURS, "cpu", "NumPy FFT implementation of the BCM layer"),
    VariantInfo("cpu_dense", BASELINE, "cpu", "NumPy dense matmul"),
], cpu_default="cpu_fft", paper="fused")
