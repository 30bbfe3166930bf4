"""distlab: train reasoning and RL models on one CPU, eight GPUs or a SLURM cluster with the same command."""

__version__ = "0.1.0"
