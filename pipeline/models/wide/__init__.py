"""cuWide (Miao et al., TKDE 2022): flow-based training of sparse wide models (LR, FM).

GPU_SUITE: the benchmark runs (each < 90 s on an H100/H200); SANITIZE: tiny configs running each
kernel once (flow in both update modes and out of core, design=warp, stage, LR and FM)."""

GPU_SUITE = [
    ["model=wide_lr", "dataset=a9a", "epochs=30", "batch_size=1024"],
    ["model=wide_lr", "dataset=ctr_synth", "dataset.scale=0.2", "epochs=3", "batch_size=1024",
     "model.baselines=[stage,torch]", "model.early_stop=false"],
    ["model=wide_fm", "dataset=ctr_synth", "dataset.scale=0.1", "epochs=3", "batch_size=1024",
     "model.baselines=[stage]", "model.early_stop=false"],
    ["model=wide_lr", "dataset=ctr_synth", "dataset.scale=0.2", "epochs=3", "batch_size=1024",
     "model.baselines=[]", "model.device_budget_mb=200", "model.early_stop=false"],
    # the authors' block-per-chunk design at the same staleness (two mini-batches in flight)
    ["model=wide_lr", "dataset=ctr_synth", "dataset.scale=0.2", "epochs=3", "batch_size=1024",
     "model.design=chunk", "model.baselines=[stage]", "model.early_stop=false"],
    ["model=wide_fm", "dataset=ctr_synth", "dataset.scale=0.1", "epochs=3", "batch_size=1024",
     "model.design=chunk", "model.baselines=[stage]", "model.early_stop=false"],
    # staler (8 mini-batches in flight): how close to the one-pass floor, and what it costs in loss
    ["model=wide_lr", "dataset=ctr_synth", "dataset.scale=0.2", "epochs=3", "batch_size=1024",
     "model.inflight=256", "model.baselines=[stage]", "model.early_stop=false"],
]

SANITIZE = [
    ["model=wide_lr", "dataset=ctr_synth", "size=small", "dataset.small_scale=0.001", "epochs=1",
     "model.baselines=[stage]"],
    ["model=wide_fm", "dataset=ctr_synth", "size=small", "dataset.small_scale=0.001", "epochs=1",
     "model.k=3", "model.update=batch", "model.baselines=[stage]"],
    ["model=wide_lr", "dataset=ctr_synth", "size=small", "dataset.small_scale=0.001", "epochs=1",
     "model.device_budget_mb=0.2", "model.baselines=[]"],
    ["model=wide_lr", "dataset=ctr_synth", "size=small", "dataset.small_scale=0.001", "epochs=1",
     "model.design=chunk", "model.baselines=[]"],
    ["model=wide_fm", "dataset=ctr_synth", "size=small", "dataset.small_scale=0.001", "epochs=1",
     "model.k=3", "model.design=warp", "model.warp_samples=4", "model.update=batch", "model.baselines=[]"],
    # the warp design's shared-memory hot-row cache (block barriers, shared atomics: racecheck)
    ["model=wide_lr", "dataset=ctr_synth", "size=small", "dataset.small_scale=0.001", "epochs=1",
     "model.hot_cache=64", "model.warps_per_block=4", "model.baselines=[]"],
]
