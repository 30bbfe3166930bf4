"""Sampling completions: the static-cache generator, the sampling settings, stop strings and per-rank seeds."""
