import json
import logging
import re

import pytest
import torch

from distlab.errors import DistlabError
from distlab.runtime.dist import Runtime
from distlab.training.checkpoint import Box, CheckpointManager, TrainState, export_model, verify_checkpoint


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _train_step(model, opt):
    loss = model(torch.ones(3, 4)).pow(2).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()


def _state(model, opt, position=0):
    state = TrainState()
    state.add_model("model", model, [opt])
    state.add("sampler", Box(position))
    return state


def _save_steps(tmp_path, steps, keep_last=5):
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    mgr = CheckpointManager(tmp_path / "ck", Runtime(), keep_last=keep_last)
    state = _state(model, opt)
    weights = {}
    for s in steps:
        _train_step(model, opt)
        state.replicated["sampler"].value = s * 10
        mgr.save(s, state, {"recipe": "test"})
        weights[s] = [p.detach().clone() for p in model.parameters()]
    return mgr, weights


def _restore(mgr, seed):
    model = _model(seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    state = _state(model, opt)
    meta = mgr.restore(state)
    return model, opt, state, meta


def test_roundtrip_restores_model_optimizer_and_extra(tmp_path):
    mgr, weights = _save_steps(tmp_path, [1, 2])
    model, opt, state, extra = _restore(mgr, seed=5)
    assert extra["step"] == 2 and state.replicated["sampler"].value == 20 and state.counters["step"] == 2
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), weights[2]))
    assert opt.state_dict()["state"][0]["step"] == 2  # Adam moments came back too
    assert mgr.latest_valid().name == "step00000002" and not (tmp_path / "ck" / "latest").exists()  # no pointer file


def test_keep_last_prunes(tmp_path):
    mgr, _ = _save_steps(tmp_path, [1, 2, 3, 4], keep_last=2)
    assert [p.name for p in mgr.steps()] == ["step00000003", "step00000004"]


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete_manifest"])
def test_corrupted_latest_falls_back_with_warning(tmp_path, caplog, damage):
    mgr, weights = _save_steps(tmp_path, [1, 2])
    newest = mgr.steps()[-1]
    data = max((p for p in newest.rglob("*.distcp")), key=lambda p: p.stat().st_size)
    if damage == "truncate":
        data.write_bytes(data.read_bytes()[:-7])
    elif damage == "flip":
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
    else:
        (newest / "MANIFEST.json").unlink()
    assert verify_checkpoint(newest) is not None
    with caplog.at_level(logging.WARNING, logger="distlab"):
        logging.getLogger("distlab").propagate = True
        model, opt, state, extra = _restore(mgr, seed=9)
    assert extra["step"] == 1
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), weights[1]))
    assert "step00000002" in caplog.text and "falling back" in caplog.text


def test_unfinished_write_is_ignored(tmp_path):
    mgr, _ = _save_steps(tmp_path, [1])
    (tmp_path / "ck" / ".tmp-step00000002").mkdir()
    assert mgr.latest_valid().name == "step00000001"


def test_export_single_file(tmp_path):
    mgr, weights = _save_steps(tmp_path, [3])
    out = export_model(mgr.steps()[-1], tmp_path / "model.pt")
    blob = torch.load(out, weights_only=False)
    model = _model(seed=1)
    model.load_state_dict(blob["model"])
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), weights[3])) and blob["step"] == 3


def test_keep_last_zero_refused(tmp_path):
    with pytest.raises(DistlabError, match="keep_last"):
        CheckpointManager(tmp_path, Runtime(), keep_last=0)


def test_async_save_finishes(tmp_path):
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    mgr = CheckpointManager(tmp_path / "ck", Runtime(), async_save=True)
    _train_step(model, opt)
    mgr.save(1, _state(model, opt))
    mgr.wait()
    assert verify_checkpoint(mgr.steps()[-1]) is None
    assert json.loads((mgr.steps()[-1] / "extra.json").read_text())["step"] == 1


def test_load_model_weights_reads_one_model_without_a_process_group(tmp_path):
    from distlab.training.checkpoint import load_model_weights

    state, nets = TrainState(), {}
    for i, name in enumerate(("actor", "policy")):
        torch.manual_seed(i)
        nets[name] = torch.nn.Linear(3, 2)
        state.add_model(name, nets[name], [torch.optim.SGD(nets[name].parameters(), lr=0.1)])
    CheckpointManager(tmp_path, Runtime()).save(1, state, {"recipe": "test"})
    for prefer, want in (("policy", "policy"), ("critic", "actor"), (None, "actor")):  # else the first listed
        fresh = torch.nn.Linear(3, 2)
        assert load_model_weights(fresh, tmp_path / "step00000001", prefer=prefer) == want
        assert torch.equal(fresh.weight, nets[want].weight) and torch.equal(fresh.bias, nets[want].bias)


def test_eval_verifies_a_given_checkpoint_once_and_ranks_load_it_as_it_is(tmp_path, monkeypatch):
    import distlab.training.checkpoint as ckpt_mod
    import distlab.launch.launcher
    from distlab.launch.evaluate import evaluate_run

    mgr, weights = _save_steps(tmp_path, [1])
    step_dir = mgr.steps()[-1]
    (tmp_path / "config.yaml").write_text("steps: 1\n")  # evaluate_run reads the run's config beside ck/
    real, calls, launched = ckpt_mod.verify_checkpoint, [], []
    monkeypatch.setattr(ckpt_mod, "verify_checkpoint", lambda d: calls.append(d) or real(d))
    monkeypatch.setattr(distlab.launch.launcher, "train", lambda *a, **kw: launched.append(kw["eval_checkpoint"]) or 0)
    assert evaluate_run(step_dir, [], None) == 0
    assert calls == [step_dir] and launched == [step_dir]
    calls.clear()
    model, opt, state, meta = _restore_path(mgr, step_dir)  # what every rank does next
    assert calls == [] and meta["step"] == 1
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), weights[1]))


def test_a_corrupt_given_checkpoint_is_refused_when_asked_to_verify(tmp_path):
    from distlab.training.checkpoint import find_checkpoint

    mgr, _ = _save_steps(tmp_path, [1])
    step_dir = mgr.steps()[-1]
    shard = next(step_dir.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:-1] + bytes([shard.read_bytes()[-1] ^ 0xFF]))
    assert find_checkpoint(step_dir) == step_dir  # export and backtest verify on their own
    with pytest.raises(DistlabError, match="cannot be trusted: .*corrupted"):
        find_checkpoint(step_dir, verify_given=True)


def _restore_path(mgr, path):
    model = _model(seed=5)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    state = _state(model, opt)
    return model, opt, state, mgr.restore(state, path=path)


def test_export_verifies_hashes_falls_back_and_names_the_corrupt_checkpoint(tmp_path, capsys):
    """As ``distlab eval``: the newest good checkpoint of a run, the skipped one named in one line; a corrupt
    checkpoint given by name is refused; a format the checkpoint's recipe does not write is one line too."""
    from distlab.cli import main

    _, weights = _save_steps(tmp_path, [1, 2])
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "ck").rename(run / "checkpoints")
    newest = run / "checkpoints" / "step00000002"
    shard = max(newest.glob("*.distcp"), key=lambda p: p.stat().st_size)
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size: only the hash can tell
    shard.write_bytes(bytes(raw))
    assert main(["export", str(run)]) == 0
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and "skipped corrupt checkpoint step00000002" in err[0] and "step00000001" in err[0], err
    model = _model(seed=7)
    model.load_state_dict(torch.load(run / "model.pt", weights_only=False)["model"])
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), weights[1]))
    for argv, message in ((["export", str(newest)], "cannot export .*step00000002: .*corrupted"),
                          (["export", str(run), "--format", "hf"], "recipe 'test'"),  # pt needs no recipe
                          (["export", str(run), "--adapter"], "add --format hf")):
        assert main(argv) == 2
        err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert len(err) == 1 and re.search(message, err[0]), err


@pytest.mark.parametrize("free, full", [(1000, True), (1 << 30, False)])
def test_a_short_write_on_a_nearly_full_disk_is_named_as_a_full_disk(tmp_path, monkeypatch, free, full):
    """torch.save's zip writer reports a short write as 'unexpected pos N vs M', with no errno: when the disk has
    almost nothing left that is a full disk, said in one line; elsewhere the error passes through unchanged."""
    import shutil
    from collections import namedtuple

    import distlab.training.checkpoint as ck

    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    mgr = CheckpointManager(tmp_path / "ck", Runtime())
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, (1 << 30) - free, free))

    def short_write(*a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")

    monkeypatch.setattr(ck.torch, "save", short_write)
    with pytest.raises(DistlabError if full else RuntimeError) as info:
        mgr.save(1, _state(model, opt))
    assert ("no space left on device" in str(info.value)) == full
    assert not list((tmp_path / "ck").glob(".tmp-step*"))  # the failed save's directory is gone either way
