"""``policy_update`` reads its statistics on the host once per step, not once per micro-batch.

Reading a GPU tensor on the host (``float``, ``.item()``) waits for every kernel queued before it, so a read per
micro-batch stops the host from queueing the next micro-batch while the GPU works. On the CPU the reads are
counted instead of timed: the count must not grow with the number of micro-batches, and the sums must be right.
"""

import contextlib

import torch
from torch import nn

from distlab.recipes.lm.pg.update import policy_update


class _Session:
    def autocast(self):
        return contextlib.nullcontext()


def _run(micro_batches: int, monkeypatch) -> tuple[dict[str, float], int]:
    torch.manual_seed(0)
    model = nn.Linear(4, 1, dtype=torch.float64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4, dtype=torch.float64)
    rows = torch.arange(8).chunk(micro_batches)

    def micro_loss(m: int):
        out = model(x[rows[m]]).squeeze(-1)
        return out.sum() / 8, {"out_sum": out.detach().sum(), "rows": torch.tensor(float(len(rows[m])),
                                                                                   dtype=torch.float64)}

    reads = []
    real_float, real_item = torch.Tensor.__float__, torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "__float__", lambda t: reads.append(1) or real_float(t))
    monkeypatch.setattr(torch.Tensor, "item", lambda t: reads.append(1) or real_item(t))
    expected = float(model(x).detach().sum())
    reads.clear()
    sums, _ = policy_update(_Session(), model, opt, micro_batches, micro_loss, max_grad_norm=1e9)
    assert abs(sums["out_sum"] - expected) < 1e-12 and sums["rows"] == 8.0
    return sums, len(reads)


def test_host_reads_do_not_grow_with_micro_batches(monkeypatch):
    _, one = _run(1, monkeypatch)
    _, four = _run(4, monkeypatch)
    assert four == one, f"{one} host reads with 1 micro-batch, {four} with 4"
