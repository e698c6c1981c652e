"""Stage 2 of RLT: the actor-critic on frozen RL-token features (DESIGN.md §4).

The learner (`networks`, `losses`, `replay`, `schedules`, `algorithm`, `learner`, `config`,
`checkpoint`) and what turns env steps into its data (`chunk_info`, `transitions`,
`rollout_stats`, `scalar_log`) need only torch and numpy (TensorBoard logging also needs
tensorboard), so a learner can run on a machine without the simulators; the names below are
theirs. The training run on the peg envs of `rpent_agents.rollout` is `trainer` (its
arguments and presets `train_args`, its command `train`: `rpent-stage2`), its success rate on
held-out seeds `evaluation`, its `results.json` `results`, and `eval_rlt` is `rpent-eval-rlt`
(where episodes fail); these import the simulators and load on their own.

Example:
    >>> from rpent_agents.stage2 import RLTDims, Stage2Config, Stage2Learner
    >>> learner = Stage2Learner(Stage2Config(device="cpu"), RLTDims(16, 9, 10, 8))
    >>> learner.ready_for_online
    False
"""

from rpent_agents.stage2.acting import act_chunks
from rpent_agents.stage2.checkpoint import (
    DEFAULT_ACTOR_DIR,
    TrainedActor,
    actor_gate,
    load_actor,
    load_weights,
    resume_run,
    save_run,
    save_weights,
)
from rpent_agents.stage2.chunk_info import ChunkInfo
from rpent_agents.stage2.config import Stage2Config
from rpent_agents.stage2.learner import Stage2Learner
from rpent_agents.stage2.networks import Actor, RLTDims, RLTObs, TwinQCritic
from rpent_agents.stage2.replay import ReplayBuffer, RLTBatch, RLTTransition
from rpent_agents.stage2.rollout_stats import ChunkStats, EpisodeStats
from rpent_agents.stage2.scalar_log import ScalarLog
from rpent_agents.stage2.schedules import UpdateSchedule, actor_loss_weights
from rpent_agents.stage2.transitions import build_transition, vector_step_items

__all__ = [
    "DEFAULT_ACTOR_DIR",
    "Actor",
    "ChunkInfo",
    "ChunkStats",
    "EpisodeStats",
    "RLTBatch",
    "RLTDims",
    "RLTObs",
    "RLTTransition",
    "ReplayBuffer",
    "ScalarLog",
    "Stage2Config",
    "Stage2Learner",
    "TrainedActor",
    "TwinQCritic",
    "UpdateSchedule",
    "act_chunks",
    "actor_gate",
    "actor_loss_weights",
    "build_transition",
    "load_actor",
    "load_weights",
    "resume_run",
    "save_run",
    "save_weights",
    "vector_step_items",
]
