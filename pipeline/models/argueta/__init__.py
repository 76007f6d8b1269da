"""Argueta & Chiang: N-hot lookup (model=fewhot) and fused softmax + top-N (model=softmax_topn).

Reusable on device arrays: :func:`fewhot_lookup` and :func:`softmax_topn` (``gpu.py``), imported
lazily so that this package imports without a GPU."""

# GPU benchmark suite: each entry one `python -m pipeline` job (< 90 s on an H100/H200).
GPU_SUITE = [
    ["experiment=argueta_table1"],
    ["experiment=argueta_table2", "model.rows=[1]"],
    ["experiment=argueta_table2", "model.rows=[512]"],
    ["experiment=argueta_table2", "model.rows=[1024]"],
]

# Tiny configs that launch every kernel once (compute-sanitizer memcheck / racecheck).
_TINY = ["bench.warmup=0", "bench.min_repeats=1", "bench.max_repeats=1", "bench.min_time_ms=0", "tracking.enabled=false"]
SANITIZE = [
    ["model=fewhot", "model.rows=5", "model.vocab=70", "model.width=36", "model.n_hot=[3]",
     "model.variants=[fewhot,fewhot_vec]", "model.baselines=[]", "size=full", *_TINY],
    ["model=fewhot", "model.rows=5", "model.vocab=70", "model.width=40", "model.n_hot=[3]",
     "model.variants=[fewhot_vec]", "model.baselines=[]", "size=full", *_TINY],
    ["model=softmax_topn", "model.rows=[3]", "model.vocab=1000", "model.top_n=[7]", "model.split=3",
     "model.variants=[topn_atomic,topn_early_exit,topn_split,topn_radix]", "model.baselines=[online_topk]",
     "size=full", *_TINY],
]


def fewhot_lookup(A_csr_device, B_device, out=None, variant: str = "paper", stream=None):
    from pipeline.models.argueta.gpu import fewhot_lookup as f
    return f(A_csr_device, B_device, out=out, variant=variant, stream=stream)


def softmax_topn(logits_device, n: int, method: str = "auto", out=None, split: int = 0, stream=None, vec: int = 0):
    from pipeline.models.argueta.gpu import softmax_topn as f
    return f(logits_device, n, method=method, out=out, split=split, stream=stream, vec=vec)
