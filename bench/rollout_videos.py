"""Side-by-side MP4s of held-out seeds: the base policy (left) against a Stage 2 actor (right).

Each seed runs twice in this process on the peg RLT stack (`RPent/PegInsertion-RLT-v0`'s
wrappers, no drop-in skipping): once with reference chunks only, once with the actor driving
where its gate opens (its mean chunk, no expert; the gate it was trained under, stored with its
weights, unless `--no-actor-gate`). Every step's `image` (the side camera) is
kept, so rendering is on for every step here. Frames get a banner: who drives and the outcome.

    .venv/bin/python bench/rollout_videos.py --stage2-run bench/figures/issue13/stage2_actor.pt \
        --seeds 2 8 29 --output-dir bench/figures/issue13/videos --env.render-backend cpu

Without `--stage2-run` the actor is the embedded default (rpent_agents/stage2/default_actor).
For one video of a run with both cameras and who drove each chunk, see `rpent-run --video`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import av
import gymnasium as gym
import numpy as np
import tyro
from tqdm import tqdm

from rpent_agents.rollout.rlt_stack import PegRLTConfig
from rpent_agents.stage2 import RLTDims, TrainedActor, actor_gate, load_actor
from rpent_envs.image_demand import image_demand_of
from wrappers.policy_switch import PolicySwitch
from wrappers.rlt import RLTObservation


@dataclass
class Args:
    stage2_run: Path | None = None
    """Stage 2 run folder or weights.pt of the actor; None: the embedded default actor."""
    seeds: list[int] = field(default_factory=lambda: [2, 8, 29])
    output_dir: Path = Path("runs/videos")
    env: PegRLTConfig = field(default_factory=PegRLTConfig)
    actor_gate: bool = True
    """Open the gate the actor was trained under (stored with its weights) instead of --env's."""
    fps: int = 10


class FrameGrab(gym.Wrapper):
    """Keeps every step's camera image (and holds the image demand, so every step renders)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.frames: list[np.ndarray] = []
        image_demand_of(env).hold(self)

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        self.frames = [observation["image"]]
        return observation, info

    def step(self, action):
        outputs = self.env.step(action)
        self.frames.append(outputs[0]["image"])
        return outputs


def run_episode(env: gym.Env, grab: FrameGrab, seed: int, actor: TrainedActor | None):
    """Frames and success of one episode (the actor drives the critical phase if given)."""
    env.actor_ready = actor is not None
    observation, info = env.reset(seed=seed)
    done = False
    while not done:
        batched = {key: value[None] for key, value in observation.items()}
        action = actor.act(batched)[0] if actor else np.zeros(80)
        observation, _, terminated, truncated, info = env.step(action.astype(np.float32))
        done = terminated or truncated
    return list(grab.frames), bool(info["success"])


def banner(frame: np.ndarray, success: bool, done: bool) -> np.ndarray:
    """The frame with a strip on top: green once it succeeded, red when it ended failing."""
    strip = np.zeros((6, frame.shape[1], 3), np.uint8)
    strip[:] = (40, 200, 60) if success and done else (200, 50, 40) if done else (90, 90, 90)
    return np.concatenate([strip, frame], axis=0)


def write_side_by_side(path: Path, base: tuple, actor: tuple, fps: int) -> None:
    (base_frames, base_ok), (actor_frames, actor_ok) = base, actor
    length = max(len(base_frames), len(actor_frames))
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        height, width = base_frames[0].shape[:2]
        stream.height, stream.width = height + 6, 2 * width + 4
        stream.pix_fmt = "yuv420p"
        for index in range(length):
            left_done = index >= len(base_frames) - 1
            right_done = index >= len(actor_frames) - 1
            left = banner(base_frames[min(index, len(base_frames) - 1)], base_ok, left_done)
            right = banner(actor_frames[min(index, len(actor_frames) - 1)], actor_ok, right_done)
            gap = np.full((left.shape[0], 4, 3), 255, np.uint8)
            frame = av.VideoFrame.from_ndarray(np.concatenate([left, gap, right], 1), "rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def main(args: Args) -> None:
    args.output_dir.mkdir(parents=True, exist_ok=True)
    config = args.env
    if args.actor_gate:
        config = config.with_gate_settings(actor_gate(args.stage2_run))
    grab = FrameGrab(config.make_peg_env())
    featurizer = config.make_featurizer()
    env = PolicySwitch(RLTObservation(grab, featurizer, config.chunk_len), config.make_gate())
    dims = RLTDims.from_observation_space(env.observation_space)
    actor_net = load_actor(args.stage2_run, dims, config.chunk_len)
    outcomes = {}
    for seed in tqdm(args.seeds, desc="seeds"):
        base = run_episode(env, grab, seed, None)
        actor = run_episode(env, grab, seed, actor_net)
        write_side_by_side(args.output_dir / f"seed{seed}_base_vs_actor.mp4", base, actor, args.fps)
        outcomes[seed] = {
            "base": base[1],
            "actor": actor[1],
            "steps": (len(base[0]) - 1, len(actor[0]) - 1),
        }
    env.close()
    print(outcomes)


if __name__ == "__main__":
    main(tyro.cli(Args))
