"""SCoRe's settings. Every hyperparameter is a named key; the maths they enter is in ``objective.py``.

Names follow the SCoRe paper (beta1, beta2, alpha) and ArCHer (tau, gamma, critic_lr) where those
papers name a quantity, and GRPO's config where the two recipes share a piece (sampling, clipping,
log-prob chunks, warm-up), so a GRPO config reads the same here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from distlab.choices import Choice
from distlab.config import ModelSettings
from distlab.errors import DistlabError
from distlab.recipes.lm.config import LMRecipeConfig


class Guidance(Choice):
    none = "none"  # plain SCoRe
    frozen = "frozen"
    trained = "trained"


class Advantage(Choice):
    mc = "mc"  # Monte Carlo turn returns minus the group baseline
    critic = "critic"  # ArCHer utterance-level twin Q/V


class TurnScale(Choice):
    group = "group"
    none = "none"


class GuidanceBaseline(Choice):
    r1 = "r1"  # a hint compared with the prompt's hints after a y1 of the same score (r1 is known before the hint)
    group = "group"  # with all the prompt's hints (before 2026-11-27)


class Arm(Choice):
    score = "score"  # SCoRe's objective: the stage schedule, alpha and gamma below decide each turn's credit
    bandit_t2 = "bandit_t2"  # turn 1 sampled without gradient, turn 2 a one-step bandit on r2 (objective.py)
    selective = "selective"  # turn 2 keeps y1 unchanged or rewrites it; rewarded for a right verdict (objective.py)


class TurnLoss(Choice):
    turn = "turn"  # per turn: mean over its segments of per-segment token means; summed over the two turns
    token = "token"  # per turn: mean over its tokens; summed over the two turns


MODEL_NAMES = ("policy", "reference", "guidance", "critic", "target_critic", "value")
# The instruction of turn 2 says nothing about whether turn 1 was right: the policy must judge that itself.
DEFAULT_INSTRUCTION = "Review your solution and write a corrected or improved version."
# selective revision: the instruction makes writing y1 again unchanged the way to say "y1 is right"
SELECTIVE_INSTRUCTION = ("Check your solution. If it is correct, write it again unchanged. If it is wrong, write a "
                         "corrected version.")


def _models() -> dict[str, ModelSettings]:
    # guidance's trainability follows the ``guidance`` key (see ``effective_models``); the default
    # here is the frozen one so that models.guidance.placement=offload passes the core check for guidance=frozen
    return {"policy": ModelSettings(), "reference": ModelSettings(trainable=False),
            "guidance": ModelSettings(trainable=False), "critic": ModelSettings(),
            "target_critic": ModelSettings(trainable=False), "value": ModelSettings()}


def _leak_markers() -> list[str]:
    return ["def ", "return ", "```", "lambda "]


@dataclass
class ScoreConfig(LMRecipeConfig):
    num_generations: int = 4  # G: turn-1 samples per prompt, each continued to one turn 2 (mc baseline group)
    loss_type: TurnLoss = TurnLoss.turn
    # --- which self-correction method (issue 46's arms; README "Arms") ---
    arm: Arm = Arm.score
    verify_bonus: float = 0.5  # selective: added to turn 2's reward when its keep/rewrite verdict matches r1
    # control arm: each step's (turn-1, turn-2) rewards are permuted across this rank's episodes before any
    # advantage, so the update sees the real reward statistics credited to the wrong episodes
    shuffle_rewards: bool = False
    # --- SCoRe objective (arXiv 2409.12917) ---
    stage_schedule: str = "I:10,II:20"  # cycled; a last "II:*" means "stage II until the end" (stage I first)
    beta1: float = 0.01  # KL weight on every turn in stage II and on turn 2 in stage I
    beta2: float | None = None  # stage I KL weight on turn-1 tokens; None = 10 x beta1 (the paper's choice)
    alpha: float = 10.0  # stage II bonus alpha * (r2 - r1) on turn 2's reward; reaches turn 1 through gamma
    # --- advantages ---
    advantage: Advantage = Advantage.mc
    scale_rewards: TurnScale = TurnScale.none  # mc only: group = divide centred returns by the group's std
    # turn-level discount of returns and TD targets. 1 (the paper: the policy gradient of the episode's total):
    # turn 1 is credited with turn 2's shaped reward, R1 = (1 - alpha) r1 + (1 + alpha) r2 in stage II, so a wrong
    # y1 that turn 2 fixes earns more than a right y1 that turn 2 copies once alpha > 1 -- the bonus's only effect
    # on *what* is learned, and a pull towards wrong first attempts that the KL must hold (measured on the CPU
    # demo at alpha 2: acc@t1 0.52 -> 0.26). 0 (the default until 2026-11-27, kept in the demo presets): each turn
    # on its own reward; alpha is then only a turn-2 step size and stage I leaves turn 1 to its KL anchor
    gamma: float = 1.0
    critic_lr: float = 1e-3
    critic_hidden: int = 256  # width of each Q/V head's MLP over pooled policy hidden states
    critic_updates: int = 1  # critic gradient steps per policy step, on that step's transitions
    tau: float = 0.1  # target critic <- (1 - tau) target + tau critic, after every critic step
    # --- guidance model ---
    guidance: Guidance = Guidance.none
    guidance_source: str = ""  # "" = model.source; may be another model (the hint travels as text)
    guidance_prompt_mode: str = ""  # "" = model.prompt_mode
    guidance_lr: float = 1e-6
    guidance_every: int = 1  # K: train the guidance every K policy steps, on that step's episodes
    # what a hint's reward is compared with: r1 = the prompt's hints after an equally scored y1; group = all G
    guidance_baseline: GuidanceBaseline = GuidanceBaseline.r1
    hint_max_tokens: int = 48
    hint_temperature: float = 1.0
    hint_len_penalty: float = 0.1  # x (hint tokens / hint_max_tokens) subtracted from the guidance reward
    hint_leak_penalty: float = 1.0  # subtracted when the hint holds code (any of leak_markers)
    leak_markers: list[str] = field(default_factory=_leak_markers)
    hint_sees_execution: bool = False  # give the guidance turn 1's test result: "extrinsic" feedback
    # give the policy turn 1's test result in the turn-2 prompt (passed, or the failing status and error tail)
    policy_sees_execution: bool = False
    error_tail_chars: int = 200  # how much of turn 1's error output the guidance (and the policy) sees
    # evaluation diagnostic: also sample turn 2 without the hint on the same y1 (the hint's gain); training never
    # does, so a guided and an unguided run spend the same rollout compute
    no_hint_sample: bool = True
    instruction: str = DEFAULT_INSTRUCTION
    restate_problem: bool = False  # text mode: repeat the problem after the instruction (small base models)
    # --- warm-up (tiny models) ---
    # sft_steps (the warm-up, text mode and tiny models) never shows a turn 2
    sft_batch_size: int = 8  # global sequences per warm-up step
    sft_pack: int = 1  # solved problems per warm-up sequence (3 trains the positions a two-turn episode reaches)
    models: dict[str, ModelSettings] = field(default_factory=_models)


def beta2_of(cfg: ScoreConfig) -> float:
    return 10.0 * cfg.beta1 if cfg.beta2 is None else float(cfg.beta2)


def used_models(cfg: ScoreConfig) -> list[str]:
    """The models these options load; the others are never built, whatever their placement says."""
    names = ["policy"]
    if cfg.beta1 > 0 or beta2_of(cfg) > 0:
        names.append("reference")
    if cfg.guidance != "none":
        names.append("guidance")
    if cfg.advantage == "critic":
        names += ["critic", "target_critic", "value"]
    return names


def effective_models(cfg: ScoreConfig) -> dict[str, ModelSettings]:
    """``cfg.models`` with the guidance trained exactly when ``guidance=trained``."""
    out = dict(cfg.models)
    out["guidance"] = replace(cfg.models["guidance"], trainable=cfg.guidance == "trained")
    return out


def guidance_config(cfg: ScoreConfig) -> ScoreConfig:
    """A view of the config whose ``model`` is the guidance's (source and prompt mode), for loading and sizing it."""
    model = replace(cfg.model, source=cfg.guidance_source or cfg.model.source,
                    prompt_mode=cfg.guidance_prompt_mode or cfg.model.prompt_mode, lora_r=cfg.model.lora_r)
    return replace(cfg, model=model, models=effective_models(cfg))


def check_arm(cfg: ScoreConfig) -> None:
    """Arm settings that cannot work together, named before launch (``recipe.check``)."""
    if cfg.steps < 0:  # 0 is allowed: the untrained control arm (presets/arm-base.yaml)
        raise DistlabError(f"steps={cfg.steps}: give 0 (evaluate the starting model only) or more")
    if cfg.arm == "bandit_t2" and cfg.advantage != "mc":
        raise DistlabError("arm=bandit_t2 trains turn 2 against the prompt's turn 2s after an equally scored y1 (its "
                           "own baseline, no critic); set advantage=mc")
    if cfg.arm == "selective" and cfg.verify_bonus < 0:
        raise DistlabError(f"verify_bonus={cfg.verify_bonus} would punish a right keep/rewrite verdict; give 0 or more")
