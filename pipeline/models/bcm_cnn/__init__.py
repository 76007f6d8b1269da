"""model=bcm_cnn: BCM CNN training (Dong et al. 2020 §4.5) against the same network with dense layers.

The GPU suite's runs (benchmarks, compute-sanitizer configs): conf/suite/bcm_cnn.yaml."""
