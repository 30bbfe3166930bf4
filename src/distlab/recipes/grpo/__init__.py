"""GRPO for causal LMs: group-relative advantages, clipped policy loss, exact global normalisation."""
