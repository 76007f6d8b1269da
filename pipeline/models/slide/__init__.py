"""SLIDE / G-SLIDE: extreme classification trained with an LSH-sampled softmax (model=slide)."""
