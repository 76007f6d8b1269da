"""model=sparse_dnn: SNIG sparse DNN inference (HPEC Sparse DNN Challenge)."""

# Runs of the GPU benchmark script (each < 90 s on one H100/H200): the official subset (~15 s on
# an H200), and a generated 4096 x 480 network with 20000 MNIST-derived images, golden from the CPU
# reference (< 60 s on an H200 machine, generation and reference included): the paper kernel and
# pull beside bf and cusparse, then the rows-per-block kernel.
GPU_SUITE = [
    ["model=sparse_dnn", "dataset=hpec_1024", "model.variants=[snig,pull]"],
    ["model=sparse_dnn", "dataset=radixnet_4096", "dataset.layers=480", "dataset.images=20000",
     "model.variants=[snig,pull]"],
    ["model=sparse_dnn", "dataset=radixnet_4096", "dataset.layers=480", "dataset.images=20000",
     "model.rows_per_block=8", "model.baselines=[]"],
    # the multi-GPU coordinator on every GPU present (one worker on a one-GPU machine); the golden
    # set and inputs come from the caches the run above filled
    ["model=sparse_dnn", "dataset=radixnet_4096", "dataset.layers=480", "dataset.images=20000",
     "model.gpus=0", "model.baselines=[]"],
]

# Tiny configs that run each kernel once (compute-sanitizer memcheck / racecheck): snig (graph)
# with bf and cusparse, snig with several sections without a graph, the rows-per-block kernel
# with a partial last block (stage_rows and row_flags run in all of them), and pull over two
# batches with partial 128-image tiles (all five pull.cu kernels).
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
