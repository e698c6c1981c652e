"""Turning one step of the RLT env (one executed chunk) into a replay transition.

The RLT env (`RPent/PegInsertion-RLT-v0`) steps a whole chunk and reports it in `info`, read
through `ChunkInfo`: `record_transition` (the chunk belongs to the critical phase and is
stored), `executed_action` (n, A) and `chunk_rewards` (n,) of the n <= H steps that ran (a
training worker's padded rows are cut at n), `chunk_len` (n), `intervene_flag` (a human or
expert drove the chunk), and `invalid_state` when the chunk ended on a non-finite state.
Observations are Dicts of `z_rl`, `proprio` and `ref_chunk`. The transition pads the chunk to
H steps: the last executed action, zero rewards.

With a vector env, `vector_step_items` splits the batched observations and infos per env, and
`final_observations` gives the observation each env's chunk ended on.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from rpent_agents.stage2.chunk_info import ChunkInfo
from rpent_agents.stage2.replay import RLTTransition

RLT_OBS_KEYS = ("z_rl", "proprio", "ref_chunk")


def _pad_steps(values: np.ndarray, chunk_len: int, mode: str) -> np.ndarray:
    """Extend the first axis of `values` to `chunk_len` rows (zeros or the last row)."""
    missing = chunk_len - values.shape[0]
    if missing <= 0:
        return values
    pad_width = [(0, missing)] + [(0, 0)] * (values.ndim - 1)
    return np.pad(values, pad_width, mode=mode)


def build_transition(
    obs: Mapping[str, np.ndarray],
    next_obs: Mapping[str, np.ndarray],
    info: Mapping[str, Any],
    terminated: bool,
    truncated: bool,
    chunk_len: int,
    truncation_ends_bootstrap: bool = True,
    reference_on_interventions: str = "executed",
) -> RLTTransition | None:
    """The replay transition of one executed chunk, or None when it is not to be stored.

    Args:
        obs: RLT observation the chunk was decided from.
        next_obs: RLT observation after the chunk (the final one if the episode ended).
        info: The step's info (see the module docstring).
        terminated: The episode terminated inside the chunk.
        truncated: The episode was truncated inside the chunk.
        chunk_len: H, the actor's chunk length.
        truncation_ends_bootstrap: Count truncation as done (reference simulation). A chunk
            that ended on a non-finite state (`info["invalid_state"]`) is done either way:
            there is no next state to bootstrap from.
        reference_on_interventions: "executed" (reference): on intervened steps the stored
            reference is replaced by the executed action, so the actor's reference input
            follows the human or expert too; "observed": the stored reference stays the VLA's
            (what the actor reads when it drives). The executed chunk is stored as `action`,
            the BC target of intervened steps, either way.

    Returns:
        The transition, or None when `info["record_transition"]` is false or missing.
    """
    chunk = ChunkInfo.from_info(info)
    if not chunk.record_transition:
        return None
    action_dim = int(np.asarray(obs["ref_chunk"]).shape[-1])
    executed, rewards = chunk.executed_steps(chunk_len, action_dim)
    intervened = chunk.intervened_steps
    ref_chunk = np.array(obs["ref_chunk"], dtype=np.float32)
    if reference_on_interventions == "executed":
        ref_chunk[: len(intervened)][intervened] = executed[intervened]
    return RLTTransition(
        z_rl=np.asarray(obs["z_rl"], np.float32),
        proprio=np.asarray(obs["proprio"], np.float32),
        ref_chunk=ref_chunk,
        action=_pad_steps(executed, chunk_len, "edge"),
        rewards=_pad_steps(rewards, chunk_len, "constant"),
        next_z_rl=np.asarray(next_obs["z_rl"], np.float32),
        next_proprio=np.asarray(next_obs["proprio"], np.float32),
        next_ref_chunk=np.asarray(next_obs["ref_chunk"], np.float32),
        done=bool(terminated or (truncated and truncation_ends_bootstrap) or chunk.invalid_state),
        intervened=_pad_steps(intervened, chunk_len, "constant"),
    )


def info_of_env(infos: Mapping[str, Any], env_index: int) -> dict[str, Any]:
    """The info of env `env_index` from a Gymnasium vector env's batched infos.

    Keys whose `_key` mask is false for this env are left out, as are the masks themselves.
    """
    info = {}
    for key, values in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not mask[env_index]:
            continue
        if isinstance(values, dict):
            info[key] = info_of_env(values, env_index)
        else:
            info[key] = values[env_index]
    return info


def obs_of_env(obs: Mapping[str, np.ndarray], env_index: int) -> dict[str, np.ndarray]:
    """The RLT observation of env `env_index` from a batched Dict observation."""
    return {key: np.asarray(obs[key][env_index]) for key in RLT_OBS_KEYS}


def vector_step_items(
    obs: Mapping[str, np.ndarray],
    next_obs: Mapping[str, np.ndarray],
    infos: Mapping[str, Any],
    terminated: np.ndarray,
    truncated: np.ndarray,
    skip: np.ndarray | None = None,
) -> Iterator[tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any], bool, bool]]:
    """Per-env (obs, next_obs, info, terminated, truncated) of one vector-env step.

    Args:
        obs: Batched observations the chunks were decided from.
        next_obs: Batched observations the step returned.
        infos: Batched infos the step returned.
        terminated: (N,) terminated flags the step returned.
        truncated: (N,) truncated flags the step returned.
        skip: (N,) envs to leave out, e.g. those whose previous step ended the episode (with
            Gymnasium's next-step autoreset their current step only resets).
    """
    for env_index in range(len(terminated)):
        if skip is not None and skip[env_index]:
            continue
        yield (
            obs_of_env(obs, env_index),
            obs_of_env(next_obs, env_index),
            info_of_env(infos, env_index),
            bool(terminated[env_index]),
            bool(truncated[env_index]),
        )


def final_observations(
    next_obs: dict[str, np.ndarray], infos: Mapping[str, Any], done: np.ndarray
) -> dict[str, np.ndarray]:
    """The observations after each env's chunk: the episode's last one where it ended.

    A worker whose chunk ends its episode starts the next one at once, so `next_obs` holds the
    new episode's first observation there and `infos["final_obs"]` the ended one's last.
    """
    if not done.any():
        return next_obs
    final = infos["final_obs"]
    return {
        key: np.where(_broadcast(done, values), final[key], values)
        for key, values in next_obs.items()
    }


def _broadcast(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    return mask.reshape(mask.shape + (1,) * (values.ndim - 1))
