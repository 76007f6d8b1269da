"""The variants of model=sparse_dnn (SNIG, HPEC Sparse DNN Challenge), in one place: the config
checks and the model read these names (this module imports nothing of the model's code)."""
from pipeline.registry import BASELINE, OURS, Registry, VariantInfo

REGISTRY = Registry("sparse_dnn", [
    VariantInfo("snig", OURS, "cuda", "the paper's kernel: row skipping, weight streaming, CUDA graphs"),
    VariantInfo("pull", OURS, "cuda", "the batch transposed and compacted, image-tiled pulls over CSC weights"),
    VariantInfo("cluster", OURS, "cuda", "pull's batch layout; outputs sharing their in-neighbour list computed "
                "together, each activation load applied to up to 16 outputs (the project's fastest)"),
    VariantInfo("bf", BASELINE, "cuda", "Bisson & Fatica's kernel (2019 champion, the paper's baseline)"),
    VariantInfo("cusparse", BASELINE, "cuda", "cuSPARSE SpMM per layer"),
    VariantInfo("cpu", OURS, "cpu", "the SciPy reference"),
], cpu_default="cpu", paper="snig")

