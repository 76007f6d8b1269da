"""The one GPU layer every model reuses: device and shared context (:mod:`.device`), kernel loading
(:mod:`.kernels`), transfers (:mod:`.transfer`), measured ceilings (:mod:`.peaks`), CUDA-event
timers and the hold kernel (:mod:`.timer`, the CUDA side of :mod:`pipeline.timing`). Nothing here imports PyCUDA or CuPy at
module import time, so the package is importable on a machine without a GPU."""
