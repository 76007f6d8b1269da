"""SLIDE / G-SLIDE: extreme classification trained with an LSH-sampled softmax (model=slide).

GPU_SUITE: benchmark runs for scripts/gpu_suite.py (each < 90 s on an H100/H200): the Amazon-670K
shape on 30 % of its generated rows against dense TF32/fp32 and PyTorch, the same with DWTA and dense
Adam, bibtex accuracy over 20 epochs, the Wiki-325K shape with a step budget (model.max_steps), and
one full Amazon-shape epoch of slide alone. SANITIZE: tiny configs launching every kernel once (hash, build, query with
padding and truncation, fused output, both Adams, the dense baseline, evaluation)."""

# Amazon-670K shape (135,909 features, 670,091 labels; batch 256, K=6, L=50). dataset.scale=0.3:
# 147,135 train rows (575 steps, about an epoch a second at 1.2 ms a step), generated once and cached.
_AMAZON = ["model=slide", "dataset=amazon670k", "batch_size=256", "model.eval_rows=20000"]

GPU_SUITE = [
    [*_AMAZON, "dataset.scale=0.3", "epochs=2", "model.baselines=[dense_tf32,dense_fp32,torch]"],
    [*_AMAZON, "dataset.scale=0.3", "epochs=2", "model.hash=dwta", "model.optimizer=adam",
     "model.baselines=[dense_tf32]"],
    # P@1 against dense on real data: bibtex (159 labels) with about 35 active a sample (64 buckets a
    # table; on the NumPy reference 8 epochs gave 0.558 against dense's 0.590)
    ["model=slide", "dataset=bibtex", "batch_size=128", "epochs=20", "model.lr=1.0e-3", "model.K=2", "model.L=10",
     "model.min_active=32", "model.bucket_capacity=32", "model.rebuild_every=1024",
     "model.baselines=[dense_tf32,torch]"],
    # Wiki-325K shape (1,617,899 features, 325,056 labels; batch 128, K=5, L=350), a step budget
    ["model=slide", "dataset=wiki325k", "dataset.scale=0.1", "batch_size=128", "model.K=5", "model.L=350",
     "epochs=1", "model.max_steps=400", "model.eval_rows=10000", "model.baselines=[dense_tf32]"],
    # one full Amazon-shape epoch (490,449 rows) against dense TF32
    [*_AMAZON, "epochs=1", "model.baselines=[dense_tf32]"],
]

_TINY = ["size=small", "epochs=1", "batch_size=64", "model.max_steps=3", "model.eval_rows=64"]
SANITIZE = [
    ["model=slide", "dataset=amazon670k", *_TINY, "model.baselines=[dense_fp32,dense_tf32]"],
    ["model=slide", "dataset=amazon670k", *_TINY, "model.hash=dwta", "model.optimizer=adam",
     "++model.small.max_active=300", "++model.small.threshold=2", "model.baselines=[]"],
    ["model=slide", "dataset=amazon670k", *_TINY, "++model.small.max_active=40", "model.small.min_active=40",
     "model.baselines=[]"],                    # truncation
]
