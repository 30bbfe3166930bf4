"""AdamW whose moment estimates are kept in fp32, bf16 or int8 (``optim.state_dtype``): the one place
recipes get their Adam-family optimizer from.

Adam keeps two moments per trainable parameter: 8 bytes in fp32, as much as the weights and
gradients together. ``bf16`` halves that, ``int8`` quarters it (block-wise quantised with one scale per
256 values, as in Dettmers et al. 2022). Both come from torchao's optimizers (``pip install
'distlab[optim]'``), pure PyTorch compiled with ``torch.compile``: they run on CPU and CUDA, on
DDP replicas and on FSDP2's DTensor shards, and every update is computed in fp32 from the stored
moments. ``fp32`` is ``torch.optim.AdamW`` itself.

Tensors under 4096 values (biases, norms) keep fp32 moments in every mode, as bitsandbytes and
torchao do: they cost little and are the most sensitive to rounding. The first step of a low-
precision optimizer compiles one small kernel per parameter shape (seconds on a GPU, up to a
minute on a CPU).
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterable
from typing import Any

import torch

from distlab.errors import DistlabError

STATE_DTYPES = ("fp32", "bf16", "int8")
INSTALL = "pip install 'distlab[optim]' (torchao)"


# torchao logs "Failed to load ..._C_mxfp8.so" for prebuilt kernels a CPU build has no use for, and torch warns
# about its enums: error-looking lines on a healthy run, printed whenever anything (transformers' quantizer
# registry, for one) imports it first
_TORCHAO_NOISE = ("torchao", "torch.utils._pytree")


def import_torchao_quietly() -> bool:
    """Import torchao, if installed, with its start-up messages silenced; whether it is available."""
    import importlib.util

    if "torchao" in sys.modules:
        return True
    if importlib.util.find_spec("torchao") is None:
        return False
    loggers = [logging.getLogger(name) for name in _TORCHAO_NOISE]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        import torchao  # noqa: F401
    except Exception:  # a broken install: whoever needs it reports that
        return False
    finally:
        for lg, level in zip(loggers[:1], levels):
            lg.setLevel(level)  # torch's pytree logger stays quiet: torchao registers more enums as it loads parts
    warnings.filterwarnings("ignore", message=".*_stable_hash_for_caching.*")
    return True


def _torchao_adam() -> Any:
    """torchao's Adam classes."""
    if not import_torchao_quietly():
        raise DistlabError(f"optim.state_dtype=bf16|int8 needs torchao: {INSTALL}, or use optim.state_dtype=fp32")
    from torchao.optim.adam import _AdamBase, AdamW8bit

    return _AdamBase, AdamW8bit


class _FloatLr:
    """torchao keeps ``lr`` as a tensor; recipes set and read plain floats. Convert around each step."""

    param_groups: list[dict]

    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32)
        try:
            return super().step(closure)  # type: ignore[misc]
        finally:
            for group in self.param_groups:
                group["lr"] = float(group["lr"])


def _bf16_adamw_class() -> type:
    base, _ = _torchao_adam()

    class AdamWBf16(_FloatLr, base):
        """torchao's Adam engine with plain bf16 moment tensors (``_subclass_zeros`` is its extension point)."""

        def __init__(self, params: Iterable, lr: float, betas: tuple[float, float], eps: float,
                     weight_decay: float) -> None:
            # block_size 1: every tensor torchao would quantise (>= 4096 values) gets bf16 moments
            base.__init__(self, params, lr, betas, eps, weight_decay, False, block_size=1,
                          bf16_stochastic_round=False, is_adamw=True)
            _plain_lrs(self)

        @staticmethod
        def _subclass_zeros(p: torch.Tensor, signed: bool, block_size: int) -> torch.Tensor:
            return torch.zeros(p.shape, dtype=torch.bfloat16, device=p.device)

    return AdamWBf16


def _int8_adamw_class() -> type:
    _, adamw8bit = _torchao_adam()

    class AdamWInt8(_FloatLr, adamw8bit):
        """torchao's ``AdamW8bit`` (block-wise int8 moments) taking and keeping float learning rates."""

        def __init__(self, params: Iterable, lr: float, betas: tuple[float, float], eps: float,
                     weight_decay: float) -> None:
            adamw8bit.__init__(self, params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
            _plain_lrs(self)

    return AdamWInt8


def _plain_lrs(opt: torch.optim.Optimizer) -> None:
    for group in opt.param_groups:
        group["lr"] = float(group["lr"])


def check_state_dtype(state_dtype: str, device: torch.device | str = "cpu") -> None:
    """One-line errors for a state dtype that cannot run here (unknown name, torchao missing)."""
    if state_dtype not in STATE_DTYPES:
        raise DistlabError(f"optim.state_dtype={state_dtype} is not one of {', '.join(STATE_DTYPES)}")
    if state_dtype != "fp32":
        _torchao_adam()


def adamw(params: Iterable, state_dtype: str = "fp32", lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
          eps: float = 1e-8, weight_decay: float = 0.01) -> torch.optim.Optimizer:
    """AdamW with its moments in ``state_dtype``; ``weight_decay=0`` is plain Adam."""
    check_state_dtype(state_dtype)
    params = list(params)
    if state_dtype == "fp32":
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    cls = _bf16_adamw_class() if state_dtype == "bf16" else _int8_adamw_class()
    return cls(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> int:
    """Bytes the optimizer's state tensors hold (quantised states count their codes and scales)."""
    total = 0
    for state in opt.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                inner = [getattr(value, n) for n in getattr(value, "__tensor_flatten__", lambda: ([], None))()[0]]
                parts = inner or [value]
                total += sum(t.numel() * t.element_size() for t in parts)
    return total
