"""The face of a run: the launcher (checks, then torchrun or one process), the worker every rank runs, and the
commands built on them (``eval``, ``export``, ``bench``, ``slurm``)."""
