"""Block-circulant matrices (Dong et al. 2020): FC and conv layers through FFT."""

# Runs of the GPU benchmark script (scripts/gpu_suite.py), and tiny runs for compute-sanitizer.
GPU_SUITE = [["model=bcm", "experiment=bcm_layers"]]
SANITIZE = [["model=bcm", "size=small", "model.layers=[A,B]", "block_size=16",
             "model.variants=[baseline,o1,o2,fused,tiled,cgemm,dft]", "bench.warmup=0", "bench.min_repeats=1",
             "bench.max_repeats=1", "bench.min_time_ms=0"]]
