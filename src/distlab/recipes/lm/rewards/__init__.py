"""Rewards: the scorer that runs programs in the sandbox or checks math answers, and the named reward functions
summed with weights."""
