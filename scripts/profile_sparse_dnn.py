"""One pass of a model=sparse_dnn GPU variant over a RadiX-Net, launched without a CUDA graph, so
that Nsight Compute can profile one layer's kernel, e.g. layer 26 of 65536 x 30 with the 60000
MNIST-derived images (the survivors of deep layers are what dominates a pass):

    ncu --clock-control none -k regex:cluster_infer --launch-skip 25 --launch-count 1 \\
        python3 scripts/profile_sparse_dnn.py cluster 65536 30 60000

Arguments: variant (pull | cluster | snig | ...), N, L, images. Inputs come from MNIST under
$PIPELINE_DATA_DIR (else random inputs of the challenge's density). Prints the pass's wall time
and the live images after each layer."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from omegaconf import OmegaConf


def main(argv) -> None:
    if len(argv) != 4 or not all(s.isdigit() for s in argv[1:]):
        sys.exit("usage: python3 scripts/profile_sparse_dnn.py VARIANT N L IMAGES (e.g. cluster 65536 30 60000)")
    from pipeline.gpu.device import exit_without_gpu
    exit_without_gpu(Path(__file__).name)
    from pipeline.data import radixnet
    from pipeline.gpu import device
    from pipeline.models.sparse_dnn import gpu
    name, N, L, n = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    f = Path(os.environ.get("PIPELINE_DATA_DIR", "data")) / "mnist" / "train-images-idx3-ubyte.gz"
    if f.is_file():
        from pipeline.data.mnist import read_idx
        a = radixnet.mnist_inputs(read_idx(f)[:n], N, n)
    else:
        a = radixnet.random_inputs(N, n, seed=N)
    Y0 = sp.csr_matrix((a["data"], a["indices"], a["indptr"]), shape=tuple(a["shape"]))
    net = radixnet.make_network(N, L, Y0, seed=0)
    cfg = OmegaConf.create(dict(batch_size=0, weight_buffers=2, num_secs=0, smem_optin=True, block=[2, 512],
                                graph=False, rows_per_block=1, pull_neurons_per_warp=4))
    r = gpu.RUNNERS[name](net, cfg, device.init(0), print)
    t0 = time.perf_counter()
    prof = r.profile()
    print(f"{name} {N}x{L} {n} images: pass {time.perf_counter() - t0:.3f} s, kernels {prof.compute_ms:.1f} ms, "
          f"{prof.categories.size} categories; live after each layer: {np.asarray(prof.rows).tolist()}")


if __name__ == "__main__":
    main(sys.argv[1:])
