"""Argueta & Chiang: N-hot lookup (model=fewhot) and fused softmax + top-N (model=softmax_topn).

Reusable on device arrays: :func:`fewhot_lookup` and :func:`softmax_topn` (``gpu.py``), imported
lazily so that this package imports without a GPU."""

# The GPU suite's runs (benchmarks, compute-sanitizer configs): conf/suite/argueta.yaml.


def fewhot_lookup(A_csr_device, B_device, out=None, variant: str = "paper", stream=None):
    from pipeline.models.argueta.gpu import fewhot_lookup as f
    return f(A_csr_device, B_device, out=out, variant=variant, stream=stream)


def softmax_topn(logits_device, n: int, method: str = "auto", out=None, split: int = 0, stream=None, vec: int = 0):
    from pipeline.models.argueta.gpu import softmax_topn as f
    return f(logits_device, n, method=method, out=out, split=split, stream=stream, vec=vec)
