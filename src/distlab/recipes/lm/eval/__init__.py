"""Evaluation of an LM policy: greedy and sampled pass@k over a task set."""
