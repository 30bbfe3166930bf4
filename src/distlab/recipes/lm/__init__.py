"""Language-model recipes (GRPO, SCoRe): model loading, generation, token log-probabilities."""
