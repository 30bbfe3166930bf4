"""distlab: train reasoning and RL models on one CPU, eight GPUs or a SLURM cluster with the same command."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``from distlab import train`` (:func:`distlab.api.train`), imported on first use so ``import distlab`` stays
    cheap for the command line."""
    if name == "train":
        from distlab.api import train

        return train
    raise AttributeError(f"module 'distlab' has no attribute {name!r}")
