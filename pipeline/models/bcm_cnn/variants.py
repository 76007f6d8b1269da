"""The variants of model=bcm_cnn: the BCM layers of the trained network run one of model=bcm's GPU
kernels, or the NumPy FFT reference on the CPU backend (``cpu`` is another name for ``cpu_fft``).
The same network with dense layers is trained beside them when ``model.dense_baseline`` is true."""
from pipeline.models.bcm.variants import BCM_KERNELS
from pipeline.registry import OURS, Registry, VariantInfo

REGISTRY = Registry("bcm_cnn", [
    *BCM_KERNELS,
    VariantInfo("cpu_fft", OURS, "cpu", "NumPy FFT BCM layers, NumPy dense layers"),
    VariantInfo("cpu", OURS, "cpu", "the same as cpu_fft"),
], cpu_default="cpu_fft", gpu_default="tiled")
