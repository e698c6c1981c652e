"""RPent environments: importing this package registers every `RPent/...` id with Gymnasium.

The import is light: simulators load only when an env is made.
"""

import gymnasium as gym

PEG_INSERTION_ID = "RPent/PegInsertionSideWideClearance-v1"

gym.register(
    id=PEG_INSERTION_ID,
    entry_point="rpent_envs.maniskill.peg_env:PegInsertionEnv",
    max_episode_steps=500,
)

PEG_RLT_ID = "RPent/PegInsertion-RLT-v0"

# A string entry point is not an import: rpent_envs still never imports rpent_agents.
# One step = one action chunk; the inner peg env keeps its 500-step limit.
gym.register(id=PEG_RLT_ID, entry_point="rpent_agents.rollout.rlt_stack:PegInsertionRLTEnv")

FRANKA_ID = "RPent/Franka-v0"

# Both Franka ids go without Gymnasium's passive checker (tests run `check_env` on them): a reset
# the arm stopped raises (`FrankaResetAborted`, to be called again), and when the first reset of
# an env raised, the checker of Gymnasium 1.4 fails the next step on reset data it never got.
gym.register(
    id=FRANKA_ID,
    entry_point="rpent_envs.franka.env:FrankaEnv",
    max_episode_steps=300,
    nondeterministic=True,  # a real arm: the same seed does not replay the same episode
    disable_env_checker=True,
)

FRANKA_RLT_ID = "RPent/FrankaPegInsertion-RLT-v0"

# Franka env -> RLTObservation -> PolicySwitch with the keyboard trigger; one step = one chunk.
gym.register(
    id=FRANKA_RLT_ID,
    entry_point="rpent_agents.rollout.franka_stack:FrankaPegInsertionRLTEnv",
    nondeterministic=True,
    disable_env_checker=True,
)

LIBERO_ID = "RPent/Libero-v0"

# No max_episode_steps here: the horizon depends on the suite, so the env truncates itself.
gym.register(id=LIBERO_ID, entry_point="rpent_envs.libero.env:LiberoEnv")

ROBOCASA_ID = "RPent/RoboCasa-v0"
ROBOTWIN_ID = "RPent/RoboTwin-v0"

# Both run their simulator in a worker process with the backend's own venv
# (`rpent-backend-venv robocasa|robotwin`); RoboTwin truncates at its tasks' step limits.
gym.register(
    id=ROBOCASA_ID, entry_point="rpent_envs.robocasa.env:RoboCasaEnv", max_episode_steps=500
)
gym.register(id=ROBOTWIN_ID, entry_point="rpent_envs.robotwin.env:RoboTwinEnv")
