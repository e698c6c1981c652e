"""Everything that learns: feature models (VLAs), the RL token, Stage 1, Stage 2, composite envs.

Seven subpackages, each importing only those listed before it: `common` (kill-safe saves, the
torch device, how the commands fail), `features` (feature models and the RL token), `stage1`
(`rpent-collect`, `rpent-stage1`), `rollout` (the composite RLT stacks and their worker pools),
`stage2` (the learner, `rpent-stage2`, evaluation, results, `rpent-eval-rlt`), `run`
(`rpent-run`) and `robot` (`rpent-stage2-robot`: Stage 2 on a real arm; `run` and `robot`
import neither each other).

The public names load lazily (module `__getattr__`): `import rpent_agents` imports neither
torch nor a simulator, `from rpent_agents import Stage2Learner` imports what that name needs.

Example:
    >>> from rpent_agents import PegRLTConfig
    >>> PegRLTConfig().chunk_len
    10
"""

from __future__ import annotations

from rpent_agents.common.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    # the peg RLT stack and the composite RLT envs
    "PegRLTConfig": "rpent_agents.rollout.rlt_stack",
    "FrankaRLTConfig": "rpent_agents.rollout.franka_stack",
    "make_peg_rlt": "rpent_agents.rollout.rlt_stack",
    "make_franka_rlt": "rpent_agents.rollout.franka_stack",
    "RLTStackEnv": "rpent_agents.rollout.rlt_stack",
    "PegInsertionRLTEnv": "rpent_agents.rollout.rlt_stack",
    "FrankaPegInsertionRLTEnv": "rpent_agents.rollout.franka_stack",
    # feature models and the RL token
    "DEFAULT_CHECKPOINT_DIR": "rpent_agents.features",
    "FeatureModel": "rpent_agents.features",
    "PrefixFeatures": "rpent_agents.features",
    "RLTFeaturizer": "rpent_agents.features",
    "load_featurizer": "rpent_agents.features",
    "BuiltinVLA": "rpent_agents.features.builtin",
    "BuiltinVLAConfig": "rpent_agents.features.builtin",
    "PI05FeatureModel": "rpent_agents.features.pi05",
    "PI05Options": "rpent_agents.features.pi05_options",
    "RemoteFeatureModel": "rpent_agents.features.remote",
    "RLToken": "rpent_agents.features.rl_token",
    "RLTokenConfig": "rpent_agents.features.rl_token",
    # Stage 2 and its training on many envs
    "DEFAULT_ACTOR_DIR": "rpent_agents.stage2",
    "act_chunks": "rpent_agents.stage2",
    "actor_gate": "rpent_agents.stage2",
    "load_actor": "rpent_agents.stage2",
    "TrainedActor": "rpent_agents.stage2",
    "RLTDims": "rpent_agents.stage2",
    "Stage2Config": "rpent_agents.stage2",
    "Stage2Learner": "rpent_agents.stage2",
    "build_transition": "rpent_agents.stage2",
    "load_weights": "rpent_agents.stage2",
    "resume_run": "rpent_agents.stage2",
    "save_run": "rpent_agents.stage2",
    "FeaturizedVectorEnv": "rpent_agents.rollout.vector",
    "make_rlt_vector_env": "rpent_agents.rollout.vector",
    "evaluate_on_seeds": "rpent_agents.stage2.evaluation",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
