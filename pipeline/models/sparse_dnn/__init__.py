"""model=sparse_dnn: SNIG sparse DNN inference (HPEC Sparse DNN Challenge).

The GPU suite's runs (benchmarks, compute-sanitizer configs): conf/suite/sparse_dnn.yaml."""
