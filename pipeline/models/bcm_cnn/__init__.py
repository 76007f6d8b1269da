"""model=bcm_cnn: BCM CNN training (Dong et al. 2020 §4.5) against the same network with dense layers."""

# Run on a GPU by the GPU benchmark script (scripts/gpu_suite.py); each finishes in < 90 s.
GPU_SUITE = [
    ["model=bcm_cnn", "dataset=cifar10", "block_size=16", "epochs=2", "model.train_limit=10000",
     "model.test_limit=2000"],
    ["model=bcm_cnn", "dataset=mnist", "block_size=32", "epochs=1", "model.train_limit=20000",
     "model.test_limit=2000"],
]

# Tiny configs running each kernel the network uses once (compute-sanitizer memcheck/racecheck).
SANITIZE = [
    ["model=bcm_cnn", "dataset=digits", "backend=cuda", "block_size=16", "epochs=1", "batch_size=32",
     "model.train_limit=64", "model.test_limit=32", "model.eval_batch=32", "kernel=tiled"],
    ["model=bcm_cnn", "dataset=digits", "backend=cuda", "block_size=16", "epochs=1", "batch_size=32",
     "model.train_limit=64", "model.test_limit=32", "model.eval_batch=32", "kernel=fused",
     "model.dense_baseline=false"],
]
