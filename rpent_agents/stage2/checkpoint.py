"""Stage 2 checkpoints: a whole run in a folder, or the network weights in one file.

A run folder holds everything a resumed run needs to continue where it stopped:
`stage2_config.json`, `learner_state.pt` (networks, target critic, optimizers, update counter,
schedule, random states and the caller's `extra` counters), `replay.npz` (the replay buffer) and
`weights.pt` (the actor and critic alone, loadable with `load_weights`, or the actor to act
with `load_actor`), plus any files the caller adds (`rpent-stage2` adds its results). A save
replaces all of them as one set (`rpent_agents.common.atomic_save`: staging folder, fsync,
rename): a process killed at any moment leaves the previous save or the new one, never a mix
and never no folder, and `resume_run` (like every later save) first finishes a save that was
committed before the kill. Networks holding NaN or inf are refused at save and at load
(ValueError naming the tensor, e.g. `critic.weights.0`), so no such run is ever
written or continued.

The package embeds one actor to act with when none is given, `DEFAULT_ACTOR_DIR`
(`rpent_agents/stage2/default_actor/`: `weights.pt` and `results.json`, its success on the
held-out seeds and how it was trained; its `README.md` says how to replace it).

Example:
    >>> learner = Stage2Learner(Stage2Config(device="cpu"), RLTDims(16, 9, 10, 8))
    >>> import tempfile
    >>> run_dir = Path(tempfile.mkdtemp()) / "run"
    >>> _ = save_run(learner, run_dir, extra={"env_steps": 0})
    >>> resumed, extra = resume_run(run_dir)
    >>> resumed.update_step, extra
    (0, {'env_steps': 0})
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import torch

from rpent_agents.common.atomic_save import complete_interrupted_save, staged_save
from rpent_agents.common.finite_checks import require_finite_tensors
from rpent_agents.stage2.acting import QRanking, act_chunks
from rpent_agents.stage2.config import Stage2Config
from rpent_agents.stage2.learner import Stage2Learner
from rpent_agents.stage2.networks import Actor, RLTDims, TwinQCritic

CONFIG_FILE = "stage2_config.json"
STATE_FILE = "learner_state.pt"
REPLAY_FILE = "replay.npz"
WEIGHTS_FILE = "weights.pt"
WEIGHTS_FORMAT = "rpent-stage2-weights-v1"
DEFAULT_ACTOR_DIR = Path(__file__).parent / "default_actor"
"""The embedded Stage 2 actor (trained on the embedded Stage 1 checkpoint): a folder with
`weights.pt` (as `save_weights` writes it) and `results.json`."""
RUN_NETWORKS = ("actor", "acting_actor", "critic", "target_critic")
"""A run's networks; "acting_actor" is the Polyak-averaged actor (`acting_actor_tau`), or the
trained actor again (a run saved before it existed lacks it: its actor acted)."""
BEHAVIOUR_NETWORKS = {"behaviour_actor": "actor", "behaviour_critic": "critic"}
"""Training's acting copies (`act_during_updates`), saved beside a run's networks, and the
network each copies."""
WEIGHTS_NETWORKS = ("actor", "critic")


def require_finite_networks(state: dict[str, Any], networks: tuple[str, ...], where: str) -> None:
    """Refuse a saved or loaded state whose network weights hold NaN or inf.

    Args:
        state: Holds one state dict per network name.
        networks: The names to check.
        where: What is saved or loaded, named in the message.

    Raises:
        ValueError: Naming the tensor (`<network>.<parameter>`).
    """
    tensors = {
        f"{network}.{name}": tensor
        for network in networks
        for name, tensor in state[network].items()
    }
    fix = "the run diverged; continue from an earlier save, or start again"
    require_finite_tensors(tensors, where, fix)


def _random_states(learner: Stage2Learner) -> dict[str, Any]:
    return {
        "sample": learner.sample_generator.get_state(),
        "sample_device": learner.sample_generator.device.type,
        "noise": learner.noise_generator.get_state(),
        "noise_device": learner.noise_generator.device.type,
    }


def _learner_state(learner: Stage2Learner, extra: dict[str, Any]) -> dict[str, Any]:
    learner.wait_for_updates()
    return {
        "dims": dataclasses.asdict(learner.dims),
        "actor": learner.actor.state_dict(),
        "acting_actor": learner.acting_actor.state_dict(),
        "critic": learner.critic.state_dict(),
        "target_critic": learner.target_critic.state_dict(),
        **{
            name: getattr(learner, name).state_dict()
            for name in BEHAVIOUR_NETWORKS
            if getattr(learner, name) is not None
        },
        "actor_optimizer": learner.actor_optimizer.state_dict(),
        "critic_optimizer": learner.critic_optimizer.state_dict(),
        "update_step": learner.update_step,
        "skipped_steps": {name: float(count) for name, count in learner.skipped_steps.items()},
        "schedule": learner.schedule.state_dict(),
        "random": _random_states(learner),
        "extra": extra,
    }


def save_run(
    learner: Stage2Learner,
    folder: Path,
    extra: dict[str, Any] | None = None,
    write_more: Callable[[Path], None] | None = None,
    gate: Mapping[str, Any] | None = None,
) -> Path:
    """Write the whole run to `folder`, replacing an earlier save there as one set.

    Args:
        learner: The learner to save.
        folder: The run folder.
        extra: The caller's own counters (plain Python values), returned by `resume_run`.
        write_more: Writes the caller's own files into the folder it is given (the staging
            folder); they are installed with the rest of the save.
        gate: When the actor drives in the stack it was trained on (plain values, e.g.
            `PegRLTConfig.gate_settings()`), stored with its weights (`save_weights`).

    Returns:
        `folder`.

    Raises:
        ValueError: When a network weight holds NaN or inf (nothing is written).
    """
    state = _learner_state(learner, extra or {})
    require_finite_networks(state, RUN_NETWORKS, f"saving the Stage 2 run to {folder}")
    with staged_save(folder) as staging:
        learner.config.to_json(staging / CONFIG_FILE)
        torch.save(state, staging / STATE_FILE)
        learner.replay.save(staging / REPLAY_FILE)
        save_weights(learner, staging / WEIGHTS_FILE, gate)
        if write_more is not None:
            write_more(staging)
    return Path(folder)


def _restore_random_states(learner: Stage2Learner, states: dict[str, Any]) -> None:
    # A generator state only fits a generator of the same device type; a run resumed on
    # another device keeps its freshly seeded generators.
    for name in ("sample", "noise"):
        generator = getattr(learner, f"{name}_generator")
        if generator.device.type == states[f"{name}_device"]:
            generator.set_state(states[name])


def resume_run(
    folder: Path, device: str | torch.device | None = None
) -> tuple[Stage2Learner, dict[str, Any]]:
    """Rebuild a learner from a run folder written by `save_run`.

    Args:
        folder: The run folder.
        device: Where to put the learner (default: the saved config's device).

    Returns:
        The learner, in the state it was saved in, and the `extra` counters.

    Raises:
        FileNotFoundError: When `folder` lacks one of the run files.
        ValueError: When a saved network weight holds NaN or inf.
    """
    folder = Path(folder)
    complete_interrupted_save(folder)
    for name in (CONFIG_FILE, STATE_FILE, REPLAY_FILE):
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"{folder / name} is missing; pass a folder written by save_run "
                "(to load network weights alone use load_weights)"
            )
    config = Stage2Config.from_json(folder / CONFIG_FILE)
    state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
    state.setdefault("acting_actor", state["actor"])
    require_finite_networks(state, RUN_NETWORKS, str(folder / STATE_FILE))
    learner = Stage2Learner(config, RLTDims(**state["dims"]), device)
    learner.actor.load_state_dict(state["actor"])
    learner.acting_actor.load_state_dict(state["acting_actor"])
    learner.critic.load_state_dict(state["critic"])
    learner.target_critic.load_state_dict(state["target_critic"])
    for name, network in BEHAVIOUR_NETWORKS.items():
        if getattr(learner, name) is not None:  # as they stood: acting resumes bit for bit
            getattr(learner, name).load_state_dict(state.get(name, state[network]))
    for optimizer, key in (
        (learner.actor_optimizer, "actor_optimizer"),
        (learner.critic_optimizer, "critic_optimizer"),
    ):
        optimizer.load_state_dict(state[key])
        for group in optimizer.param_groups:  # a run saved on another device: this one's setting
            group["capturable"] = learner.use_cuda_graphs
    learner.update_step = int(state["update_step"])
    for name, count in state.get("skipped_steps", {}).items():
        learner.skipped_steps[name].fill_(count)
    learner.schedule.load_state_dict(state["schedule"])
    learner.replay.load(folder / REPLAY_FILE)
    _restore_random_states(learner, state["random"])
    return learner, state["extra"]


def save_weights(learner: Stage2Learner, path: Path, gate: Mapping[str, Any] | None = None) -> None:
    """Write the acting actor and the critic weights (with their sizes) to one file.

    The acting actor is the trained one, or its Polyak average when the learner keeps one
    (`Stage2Config.acting_actor_tau`): the policy the run evaluated.

    Args:
        learner: Whose networks to write.
        path: The file.
        gate: When the actor drives, as the stack it was trained on sets it (plain values,
            e.g. `PegRLTConfig.gate_settings()`); `load_actor` gives it back as
            `TrainedActor.gate`, so whoever acts with it opens the same gate.

    Raises:
        ValueError: When a weight holds NaN or inf (nothing is written).
    """
    learner.wait_for_updates()
    weights = {
        "format": WEIGHTS_FORMAT,
        "dims": dataclasses.asdict(learner.dims),
        "chunk_len": learner.config.chunk_len,
        "actor": learner.acting_actor.state_dict(),
        "critic": learner.critic.state_dict(),
        "eval_q_filter": learner.config.eval_q_filter,
        "acting_samples": learner.config.acting_samples,
        "acting_sample_std": learner.config.acting_sample_std,
        "eval_consensus": learner.config.eval_consensus,
        "actor_ready": learner.ready_for_online,
        "gate": dict(gate or {}),
    }
    require_finite_networks(weights, WEIGHTS_NETWORKS, f"saving Stage 2 weights to {path}")
    torch.save(weights, path)


def read_weights(path: Path) -> tuple[Path, dict[str, Any]]:
    """The weights file of `path` (a weights file or a folder holding `weights.pt`), read.

    Raises:
        FileNotFoundError: When there is no such file.
        ValueError: When the file is not a Stage 2 weights file, or a weight holds NaN or inf.
    """
    path = Path(path)
    if path.is_dir():
        complete_interrupted_save(path)
        path = path / WEIGHTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no Stage 2 weights file; give a run folder or weights.pt")
    weights = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(weights, dict) or weights.get("format") != WEIGHTS_FORMAT:
        raise ValueError(f"{path} is not a Stage 2 weights file (written by save_weights)")
    require_finite_networks(weights, WEIGHTS_NETWORKS, str(path))
    return path, weights


def check_weights_fit(
    path: Path, weights: dict[str, Any], dims: RLTDims, chunk_len: int, user: str
) -> None:
    """Refuse weights saved for other observation sizes or another chunk length.

    Raises:
        ValueError: Naming both sizes.
    """
    saved = (RLTDims(**weights["dims"]), weights["chunk_len"])
    if saved != (dims, chunk_len):
        raise ValueError(
            f"{path} holds networks for dims {saved[0]} and chunk_len {saved[1]}; {user} "
            f"has {dims} and chunk_len {chunk_len}"
        )


def load_weights(learner: Stage2Learner, path: Path) -> None:
    """Load a weights file (or a run folder's `weights.pt`) into `learner`; resets its target.

    Raises:
        ValueError: When the file is not a Stage 2 weights file, its sizes differ or a weight
            holds NaN or inf.
    """
    path, weights = read_weights(path)
    check_weights_fit(path, weights, learner.dims, learner.config.chunk_len, "this learner")
    learner.wait_for_updates()
    for actor in (learner.actor, learner.acting_actor):
        actor.load_state_dict(weights["actor"])
    learner.critic.load_state_dict(weights["critic"])
    learner.target_critic.load_state_dict(learner.critic.state_dict())
    learner.refresh_behaviour_networks()


class TrainedActor(NamedTuple):
    """A trained Stage 2 actor to act with, and the critic that ranks its chunks.

    Attributes:
        actor: The actor, in evaluation mode.
        q_filter: The run's critic when it evaluated through it (`eval_q_filter`, or
            `acting_samples`: the candidate chunk it values highest runs, `QRanking`), else
            None.
        gate: When it drives, as in training (e.g. `{"trigger_mode": "auto",
            "missed_grasp_chunks": 4}` for the peg stack, `PegRLTConfig.with_gate_settings`);
            empty for files saved before the gate was stored: the stack's default gate.
        samples: Perturbations of its mean the critic also values (`acting_samples`).
        sample_std: Their std before the tanh (`acting_sample_std`).
        consensus: Another chunk beats the reference only by every head (`eval_consensus`).
        ready: Whether the run's learner let it drive when the file was written (its warm-up
            done: `Stage2Learner.ready_for_online`); an actor that is not ready never acts,
            the reference drives where it would (files saved before this was stored: True).
    """

    actor: Actor
    q_filter: TwinQCritic | None
    gate: Mapping[str, Any] = MappingProxyType({})
    samples: int = 0
    sample_std: float = 0.0
    consensus: bool = False
    ready: bool = True

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Flat mean chunks (B, H*A) for batched RLT observations, ranked as the run was."""
        ranking = None
        if self.q_filter is not None:
            ranking = QRanking(self.q_filter, self.samples, self.sample_std, self.consensus)
        return act_chunks(self.actor, obs, deterministic=True, ranking=ranking)


def load_actor(
    path: Path | None, dims: RLTDims, chunk_len: int, device: str | torch.device = "cpu"
) -> TrainedActor:
    """The actor of a weights file or run folder (its Q filter and gate too), to act with.

    No learner is built (no optimizer or replay buffer; the critic only when the run
    evaluated through it); the layer sizes are read from the saved tensors. Act with its mean
    chunk: `load_actor(...).act(obs)`.

    Args:
        path: A weights file or a folder holding `weights.pt`; None: the embedded actor
            (`DEFAULT_ACTOR_DIR`).
        dims: The observation sizes of the RLT stack it acts on.
        chunk_len: The stack's chunk length H.
        device: Where to put it.

    Raises:
        FileNotFoundError: When `path` holds no weights file.
        ValueError: When the file is not a Stage 2 weights file or was saved for other sizes.
    """
    path, weights = read_weights(path or DEFAULT_ACTOR_DIR)
    check_weights_fit(path, weights, dims, chunk_len, "the RLT stack")
    state = weights["actor"]
    actor = Actor(
        dims, chunk_len, state["backbone.0.weight"].shape[0], _linear_layers(state, "backbone.")
    )
    actor.load_state_dict(state)
    samples = int(weights.get("acting_samples", 0))  # files saved before it: no samples
    q_filter = None
    if weights.get("eval_q_filter", False) or samples > 0:  # older files: no filter
        q_filter = TwinQCritic.from_state_dict(dims, chunk_len, weights["critic"])
        q_filter = q_filter.to(device).eval().requires_grad_(False)
    actor = actor.to(device).eval().requires_grad_(False)
    return TrainedActor(
        actor,
        q_filter,
        dict(weights.get("gate", {})),
        samples=samples,
        sample_std=float(weights.get("acting_sample_std", 0.0)),
        consensus=bool(weights.get("eval_consensus", False)),
        ready=bool(weights.get("actor_ready", True)),
    )


def actor_gate(path: Path | None) -> dict[str, Any]:
    """When the actor of `path` (None: the embedded actor) drives, as stored with it.

    `TrainedActor.gate` without loading the networks: what a caller needs before it builds
    the envs. Empty for files saved before the gate was stored.

    Raises:
        FileNotFoundError: When `path` holds no weights file.
        ValueError: When the file is not a Stage 2 weights file.
    """
    return dict(read_weights(path or DEFAULT_ACTOR_DIR)[1].get("gate", {}))


def _linear_layers(state: Mapping[str, torch.Tensor], prefix: str) -> int:
    """Linear layers of a saved MLP: the 2-D weights under `prefix` (LayerNorms are 1-D)."""
    return sum(
        1 for key, tensor in state.items()
        if key.startswith(prefix) and key.endswith(".weight") and tensor.ndim == 2
    )  # fmt: skip
