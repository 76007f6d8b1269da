"""Block-circulant matrices (Dong et al. 2020): FC and conv layers through FFT.

The GPU suite's runs (benchmarks, compute-sanitizer configs): conf/suite/bcm.yaml."""
