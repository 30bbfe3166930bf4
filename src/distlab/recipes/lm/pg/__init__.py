"""The policy-gradient update shared by GRPO and SCoRe: the loss, token log-probs, micro-batching, the update step,
the warm-up and the record kept of a non-finite gradient."""
