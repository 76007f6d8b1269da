"""The one GPU layer every model reuses: device and shared context (:mod:`.device`), kernel loading
(:mod:`.kernels`), transfers (:mod:`.transfer`), measured ceilings (:mod:`.peaks`). Timing lives in
:mod:`pipeline.timing`. Nothing here imports PyCUDA or CuPy at module import time, so the package
is importable on a machine without a GPU."""
