"""cuWide (Miao et al., TKDE 2022): flow-based training of sparse wide models (LR, FM).

The GPU suite's runs (benchmarks, compute-sanitizer configs): conf/suite/wide.yaml."""
