"""The LM recipes' models: where the weights come from (hub, GGUF, tiny or random shapes), the named models placed
on each rank, the attention kernels, and export to transformers' format."""
