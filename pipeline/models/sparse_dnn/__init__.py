"""model=sparse_dnn: SNIG sparse DNN inference (HPEC Sparse DNN Challenge)."""

# Runs of the GPU benchmark script: the official subset (checked row for row against the official
# golden file), then every challenge size at L = 120 with all 60000 MNIST-derived images through
# every variant (snig and pull beside the bf and cusparse baselines; golden set and
# rounding-ambiguous rows from the exact CPU reference, cached under cache_dir after the first
# run). 16384 and 65536 time one pass per variant (the checked and the profiled pass are run
# too, so determinism is still compared). Then the rows-per-block kernel and the multi-GPU
# coordinator on the 4096 network (from the caches the run above filled).
GPU_SUITE = [
    ["model=sparse_dnn", "dataset=hpec_1024", "model.variants=[snig,pull]"],
    ["model=sparse_dnn", "dataset=radixnet_1024", "model.variants=[snig,pull]", "model.baselines=[bf,cusparse]"],
    ["model=sparse_dnn", "dataset=radixnet_4096", "model.variants=[snig,pull]", "model.baselines=[bf,cusparse]"],
    ["model=sparse_dnn", "dataset=radixnet_16384", "model.variants=[snig,pull]", "model.baselines=[bf,cusparse]",
     "model.repeats=1", "model.warmup=0"],
    ["model=sparse_dnn", "dataset=radixnet_65536", "model.variants=[snig,pull]", "model.baselines=[bf,cusparse]",
     "model.repeats=1", "model.warmup=0"],
    ["model=sparse_dnn", "dataset=radixnet_4096", "model.rows_per_block=8", "model.baselines=[]"],
    # the multi-GPU coordinator on every GPU present (one worker on a one-GPU machine)
    ["model=sparse_dnn", "dataset=radixnet_4096", "model.gpus=0", "model.baselines=[]"],
]

# Tiny configs that run each kernel once (compute-sanitizer memcheck / racecheck): snig (graph)
# with bf and cusparse, snig with several sections without a graph, the rows-per-block kernel
# with a partial last block (stage_rows and row_flags run in all of them), and pull over two
# batches with partial 128-image tiles (all five pull.cu kernels). The digest kernel runs in
# each (the profiled and the checked pass are digested).
SANITIZE = [
    ["model=sparse_dnn", "dataset=hpec_1024", "dataset.layers=6", "dataset.images=64", "kernel=snig",
     "model.baselines=[bf,cusparse]", "model.repeats=1", "model.warmup=0"],
    ["model=sparse_dnn", "dataset=hpec_1024", "dataset.layers=6", "dataset.images=64", "kernel=snig",
     "model.num_secs=4", "model.graph=false", "model.baselines=[]", "model.repeats=1", "model.warmup=0"],
    ["model=sparse_dnn", "dataset=hpec_1024", "dataset.layers=5", "dataset.images=61", "kernel=snig",
     "model.rows_per_block=4", "model.num_secs=2", "model.baselines=[]", "model.repeats=1", "model.warmup=0"],
    ["model=sparse_dnn", "dataset=hpec_1024", "dataset.layers=5", "dataset.images=200", "kernel=pull",
     "model.batch_size=130", "model.baselines=[]", "model.repeats=1", "model.warmup=0"],
]
