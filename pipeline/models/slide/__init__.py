"""SLIDE / G-SLIDE: extreme classification trained with an LSH-sampled softmax (model=slide).

The GPU suite's runs (benchmarks, compute-sanitizer configs): conf/suite/slide.yaml."""
