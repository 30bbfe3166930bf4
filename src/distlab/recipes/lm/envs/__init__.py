"""Multi-turn environments for the LM recipes: an API (:mod:`.api`), the driver that plays a batch of episodes
(:mod:`.rollout`) into token-level trajectories with the mask of the policy's own tokens (:mod:`.trajectory`), and
the environments ``env.name`` picks (:mod:`.registry`): ``code_feedback`` and ``math_tool``."""
