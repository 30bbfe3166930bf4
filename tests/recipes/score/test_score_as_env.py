"""SCoRe's two turns are one environment of the environment API (``score/env.py``, issue 49 item 2): its steps on
hand-written replies, and whole runs that end on the very weights they ended on before SCoRe played through it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from score_cli import run_cli, summary  # noqa: E402

from distlab.recipes.lm.envs.api import resolved  # noqa: E402
from distlab.recipes.lm.envs.trajectory import encode  # noqa: E402
from distlab.recipes.lm.models.tiny import byte_tokenizer  # noqa: E402
from distlab.recipes.lm.rewards.scorer import RewardScorer  # noqa: E402
from distlab.recipes.lm.rollout.stops import Completion  # noqa: E402
from distlab.recipes.lm.tasks import Task  # noqa: E402
from distlab.recipes.score.config import ScoreConfig  # noqa: E402
from distlab.recipes.score.env import SelfCorrection, SelfCorrectionSetup  # noqa: E402
from distlab.recipes.score.episode import EXTRINSIC, ROLE_FEEDBACK, ROLE_Y1, ROLE_Y2, turn2_pieces  # noqa: E402
from distlab.sandbox import SandboxConfig  # noqa: E402

TASK = Task("t0", "Write add1(x).", "add1", "assert add1(1) == 2\n", "assert add1(1) == 2", "synthetic",
            solution="def add1(x):\n    return x + 1")


def test_the_two_turns_step_as_an_environment():
    tok = byte_tokenizer()
    cfg = ScoreConfig(policy_sees_execution=True)
    scorer = RewardScorer(SandboxConfig(workers=1, timeout_s=3.0), "text")
    try:
        setup = SelfCorrectionSetup(cfg, tok, "text", [], scorer)
        env = SelfCorrection(TASK, 0, "Write add1(x).\n```python\n", setup)
        assert env.reset() == "Write add1(x).\n```python\n" and env.max_turns == 2
        assert (env.reply_role(0), env.reply_role(1)) == (ROLE_Y1, ROLE_Y2)
        y1 = Completion(0, [], encode(tok, "def add1(x):\n    return x\n"), "def add1(x):\n    return x\n", "stop")
        (step,) = SelfCorrection.step_all([env], [y1], None)
        assert not step.done and resolved(step.reward) == 0.0 and env.episode.r1 == 0.0  # waited for: it is shown
        feedback = [text for text, role in step.observation if role == ROLE_FEEDBACK]
        assert feedback[0].startswith(f"{EXTRINSIC}: failed.") and "AssertionError" in feedback[0]
        assert step.observation == turn2_pieces(TASK, tok, "text", env.prompt1, y1, "", cfg.instruction, (),
                                                cfg.restate_problem, feedback[0])
        y2 = Completion(0, [], encode(tok, "def add1(x):\n    return x + 1\n"), "def add1(x):\n    return x + 1\n",
                        "stop")
        step = env.step(y2)
        assert step.done and step.observation == [] and resolved(step.reward) == 1.0 and env.episode.y2 is y2
    finally:
        scorer.close()


TINY = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=4", "num_generations=4",
        "micro_batch_size=8", "sampling.max_completion_length=40", "hint_max_tokens=6", "task.train_size=32",
        "task.eval_size=8", "task.families=add_const", "task.eval_families=add_const", "task.eval_split=train",
        "evaluation.before=true", "log.every=1", "log.progress=false", "lr=1e-3", "guidance_lr=1e-3", "beta1=0.05",
        "sft_steps=60", "sft_lr=3e-3", "sft_batch_size=8", "sft_pack=3", "restate_problem=true", "steps=3"]
EVERY = ["guidance=trained", "advantage=critic", "hint_sees_execution=true", "stage_schedule=I:1,II:1",
         "policy_sees_execution=true"]
# this run's summary param_checksums at 2f7ec58, before SCoRe played its episodes through lm/envs (torch 2.13 CPU);
# rewards vary within groups there (acc@t1 0.44, 0.12, 0.25), so every model's update depends on the episodes
BEFORE = {"critic": "09d3b010a2fc9a303a9af121a1ece8722bc254c3", "guidance": "066f9699367d6802cbd1f548af644f52eb5070eb",
          "policy": "6c5dd9934499448a7407054d6fa9f31e07175b3b",
          "target_critic": "6142ddbd4a1fb752e7b78a9b7ceb63fa09d3beb4",
          "value": "50695eb44d13049bad2d6d51da377d31aab0e23d"}


def test_a_run_ends_on_the_weights_it_ended_on_before(tmp_path):
    if not torch.__version__.startswith("2.13"):
        pytest.skip(f"the checksums were recorded with torch 2.13 on CPU; this is {torch.__version__}")
    run_cli(["train", "score", *TINY, *EVERY, "run.name=every", "--procs", "1"], tmp_path, timeout=600)
    s = summary(tmp_path / "runs" / "every")
    assert s["status"] == "completed" and s["param_checksums"] == BEFORE
    assert s["eval"]["acc_t1"] == 0.25 and "acc_t2_no_hint" in s["eval"]  # the no-hint turn 2 of evaluation too
