"""Hydra entry point: ``python -m pipeline model=bcm block_size=64``."""
from pipeline.app import main

if __name__ == "__main__":
    main()
