"""model=sparse_dnn: SNIG sparse DNN inference (HPEC Sparse DNN Challenge)."""

# Runs of the GPU benchmark script (each < 90 s on one H100/H200): the official subset, and a
# generated 4096 x 480 network with 20000 MNIST-derived images (golden from the CPU reference).
GPU_SUITE = [
    ["model=sparse_dnn", "dataset=hpec_1024"],
    ["model=sparse_dnn", "dataset=radixnet_4096", "dataset.layers=480", "dataset.images=20000"],
]

# Tiny configs that run each kernel once (compute-sanitizer memcheck / racecheck): snig with one and
# with several sections (stage_rows and row_flags run in both), bf, and the snig pass without a graph.
SANITIZE = [
    ["model=sparse_dnn", "dataset=hpec_1024", "dataset.layers=6", "dataset.images=64", "kernel=snig",
     "model.baselines=[bf]", "model.repeats=1", "model.warmup=0"],
    ["model=sparse_dnn", "dataset=hpec_1024", "dataset.layers=6", "dataset.images=64", "kernel=snig",
     "model.num_secs=4", "model.graph=false", "model.baselines=[]", "model.repeats=1", "model.warmup=0"],
]
