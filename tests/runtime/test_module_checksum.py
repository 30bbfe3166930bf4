"""The weights' digest that run summaries carry: any changed byte changes it, equal weights give equal digests."""

import pytest
import torch

from distlab.runtime import dist
from distlab.runtime.dist import _device_fingerprint, module_checksum, tensor_digest


def _flipped(t: torch.Tensor, byte: int) -> torch.Tensor:
    out = t.clone()
    out.reshape(-1).view(torch.uint8)[byte] ^= 1
    return out


@pytest.mark.parametrize("digest", [tensor_digest, _device_fingerprint], ids=["cpu-sha1", "device-sums"])
def test_one_flipped_bit_anywhere_changes_the_digest(digest, monkeypatch):
    monkeypatch.setattr(dist, "_CHUNK", 64)  # several chunks, the last one partial
    t = torch.randn(50)  # 200 bytes: chunks of 64, 64, 64, 8
    base = digest(t)
    changed = {digest(_flipped(t, b)) for b in range(t.numel() * 4)}
    assert base not in changed and len(changed) == t.numel() * 4


def test_device_sums_are_exact_and_chunked():
    t = torch.arange(10, dtype=torch.uint8)
    weights = [(i * 2654435761) % (1 << 31) | 1 for i in range(10)]
    expected = sum(int(x) * w for x, w in zip(t.tolist(), weights))
    assert torch.tensor(list(memoryview(_device_fingerprint(t)).cast("q"))).tolist() == [expected]
    assert _device_fingerprint(torch.zeros(0)) == b""


def test_module_checksum_equal_weights_equal_names_dtypes_shapes_matter():
    torch.manual_seed(0)
    a = torch.nn.Linear(8, 4)
    b = torch.nn.Linear(8, 4)
    b.load_state_dict(a.state_dict())
    assert module_checksum(a) == module_checksum(b)
    with torch.no_grad():
        b.bias.view(torch.uint8)[3] ^= 0x80
    assert module_checksum(a) != module_checksum(b)
    c = torch.nn.Linear(8, 4).to(torch.float64)
    assert module_checksum(c) != module_checksum(a)
    flat = torch.nn.Module()
    flat.weight = torch.nn.Parameter(a.weight.detach().reshape(4, 8).t().contiguous().t())  # same shape, same data
    flat.bias = torch.nn.Parameter(a.bias.detach().clone())
    assert module_checksum(flat) == module_checksum(a)
    flat.weight = torch.nn.Parameter(a.weight.detach().reshape(8, 4).clone())  # same bytes, another shape
    assert module_checksum(flat) != module_checksum(a)
