"""Micro-batches cut to their own widest row; rows sorted by length so that the cut saves the most."""

import torch

from distlab.recipes.lm.pg.batching import by_length, micro_batches, sequences


def test_each_micro_batch_is_cut_to_its_widest_row():
    prompts = [[1, 2], [1], [1, 2, 3], [4]]
    completions = [[5], [5, 6, 7, 8, 9, 10], [5], [6]]
    order = by_length([len(p) + len(c) for p, c in zip(prompts, completions)])
    assert order.tolist() == [3, 0, 2, 1]
    ids, attn, comp = sequences([prompts[i] for i in order], [completions[i] for i in order], 0, torch.device("cpu"))
    assert ids.shape == (4, 7)
    batches = micro_batches(4, 2, attn)
    assert [(r.start, r.stop, c.stop) for r, c in batches] == [(0, 2, 3), (2, 4, 7)]
    rows, cols = batches[0]
    assert attn[rows, cols.stop:].sum() == 0 and bool(attn[rows, cols.stop - 1].any())  # only padding was cut
    assert micro_batches(5, 2) == [slice(0, 2), slice(2, 4), slice(4, 5)]  # without a mask: rows only
