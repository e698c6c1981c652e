"""A small chunked task where a biased reference fails and Q-learning can fix it.

A point moves in the plane: each chunk is H steps, each step moves 0.1 x action (action in
[-1, 1]^2). The episode succeeds (reward 1 on that step, episode over) when the point comes
within `GOAL_RADIUS` of the goal, within `MAX_CHUNKS` chunks. The observation is what Stage 2
reads: `z_rl` = [goal, zeros], `proprio` = the point, `ref_chunk` = a reference that heads for
the goal shifted across the approach (towards +x) by a bias drawn per episode (0 to
`MAX_BIAS`): it succeeds only when the bias happens to be small. Behaviour cloning copies the
bias (with the reference dropped out too: its mean is biased); the critic sees which chunks
reached the goal and lets the actor correct it. The start is 1.1 away and a chunk moves at most
0.4, so the first chunks must already head right: the reward reaches them only through the
bootstrap of the TD target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rpent_agents.stage2 import RLTDims, RLTTransition, Stage2Learner

HORIZON = 4
ACTION_DIM = 2
STEP_SIZE = 0.1
GOAL_RADIUS = 0.08
MAX_BIAS = 0.3
MAX_CHUNKS = 3
DIMS = RLTDims(z_dim=4, proprio_dim=2, ref_chunk_len=HORIZON, action_dim=ACTION_DIM)


@dataclass
class Episode:
    """One episode's goal, bias and point (it starts 1.1 below the goal)."""

    goal: np.ndarray
    bias: np.ndarray
    point: np.ndarray
    chunks: int = 0

    @classmethod
    def sample(cls, rng: np.random.Generator) -> Episode:
        goal = rng.uniform(-0.5, 0.5, 2)
        start = goal + np.array([rng.uniform(-0.1, 0.1), -1.1])  # approach along +y
        bias = np.array([rng.uniform(0.0, MAX_BIAS), 0.0])  # always towards +x
        return cls(goal, bias, start)

    def observation(self) -> dict[str, np.ndarray]:
        target = self.goal + self.bias
        ref = np.zeros((HORIZON, ACTION_DIM), np.float32)
        point = self.point.copy()
        for step in range(HORIZON):
            ref[step] = np.clip((target - point) / STEP_SIZE, -1.0, 1.0)
            point = point + STEP_SIZE * ref[step]
        z_rl = np.concatenate([self.goal, np.zeros(2)]).astype(np.float32)
        return {"z_rl": z_rl, "proprio": self.point.astype(np.float32), "ref_chunk": ref}

    def step_chunk(self, chunk: np.ndarray) -> tuple[np.ndarray, bool, int]:
        """Run the chunk; returns per-step rewards (H,), done, steps run."""
        rewards = np.zeros(HORIZON, np.float32)
        self.chunks += 1
        for step in range(HORIZON):
            self.point = self.point + STEP_SIZE * np.clip(chunk[step], -1.0, 1.0)
            if np.linalg.norm(self.point - self.goal) < GOAL_RADIUS:
                rewards[step] = 1.0
                return rewards, True, step + 1
        return rewards, self.chunks >= MAX_CHUNKS, HORIZON


def run_episode(
    learner: Stage2Learner, rng: np.random.Generator, use_actor: bool, deterministic: bool
) -> tuple[list[RLTTransition], bool]:
    """One episode driven by the actor (or the reference); its transitions and success."""
    episode = Episode.sample(rng)
    obs = episode.observation()
    transitions, done, success = [], False, False
    while not done:
        if use_actor:
            batched = {key: value[None] for key, value in obs.items()}
            chunk = learner.act(batched, deterministic=deterministic)[0].reshape(HORIZON, -1)
        else:
            chunk = obs["ref_chunk"]
        rewards, done, steps = episode.step_chunk(chunk)
        success = bool(rewards.sum() > 0)
        next_obs = episode.observation()
        executed = np.concatenate(
            [chunk[:steps], np.repeat(chunk[steps - 1 : steps], HORIZON - steps, 0)]
        )
        transitions.append(
            RLTTransition(
                z_rl=obs["z_rl"], proprio=obs["proprio"], ref_chunk=obs["ref_chunk"],
                action=executed.astype(np.float32), rewards=rewards,
                next_z_rl=next_obs["z_rl"], next_proprio=next_obs["proprio"],
                next_ref_chunk=next_obs["ref_chunk"], done=done,
                intervened=np.zeros(HORIZON, bool),
            )
        )  # fmt: skip
        obs = next_obs
    return transitions, success


def success_rate(learner: Stage2Learner, episodes: int, seed: int, use_actor: bool = True) -> float:
    """Success over `episodes` held-out episodes with the actor's mean chunk (or the reference)."""
    rng = np.random.default_rng(seed)
    return float(
        np.mean(
            [run_episode(learner, rng, use_actor, deterministic=True)[1] for _ in range(episodes)]
        )
    )


def train(learner: Stage2Learner, episodes: int, seed: int) -> None:
    """Collect `episodes` training episodes (the reference until the actor is ready) and learn."""
    rng = np.random.default_rng(seed)
    for _ in range(episodes):
        transitions, _ = run_episode(learner, rng, learner.ready_for_online, deterministic=False)
        learner.add_transitions(transitions)
        learner.train_step()
