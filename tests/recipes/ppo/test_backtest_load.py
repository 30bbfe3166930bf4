"""``distlab backtest`` reads a policy's weights from either checkpoint layout, on one CPU process."""

import json

import torch
import torch.distributed.checkpoint as dcp

from distlab.recipes.ppo.backtest_cli import load_policy_weights
from distlab.runtime.dist import Runtime
from distlab.training.checkpoint import CheckpointManager, TrainState


def _policy(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_tracked_state_layout(tmp_path):
    trained = _policy(0)
    state = TrainState()
    state.add_model("policy", trained, [torch.optim.Adam(trained.parameters())])
    CheckpointManager(tmp_path / "checkpoints", Runtime()).save(3, state, {"recipe": "ppo"})
    fresh = _policy(1)
    assert not _same(fresh, trained)
    load_policy_weights(fresh, tmp_path / "checkpoints" / "step00000003")
    assert _same(fresh, trained)


def test_older_single_model_layout(tmp_path):
    trained = _policy(0)
    dcp.save({"model": trained.state_dict()}, checkpoint_id=str(tmp_path))
    (tmp_path / "extra.json").write_text(json.dumps({"step": 3, "recipe": "ppo"}))
    fresh = _policy(1)
    load_policy_weights(fresh, tmp_path)
    assert _same(fresh, trained)
