"""Stage 2 learner updates/s against Stable-Baselines3 SAC updates/s, same device, one run.

Both learners get the same batch size and equal networks (actor 3 x 256 Tanh, twin critic
3 x 256) and train on a replay buffer of random RLT transitions (sizes of the pi0.5 RL token by
default). An "update" is one critic step with its target update (and, for Stage 2, the actor step
on every `critic_actor_ratio`-th update; SAC steps actor and entropy coefficient every time).
Stage 2 is also timed with critic_actor_ratio=1 to show what the ratio contributes and, on a
CUDA device, without its CUDA graphs (`Stage2Config.cuda_graphs=False`: the eager update).

Needs torch, numpy, stable-baselines3 (with gymnasium, cloudpickle, farama-notifications); the
arguments use argparse so that nothing else has to be carried to a GPU machine.

Usage (from the repository root):
    PYTHONPATH=. python bench/learner_speed.py --device cuda --updates 3000
    .venv/bin/python bench/learner_speed.py --device cpu --z-dim 256 --batch-size 256 --updates 100
"""

import argparse
import dataclasses
import time

import numpy as np
import torch

from rpent_agents.stage2 import RLTDims, RLTTransition, Stage2Config, Stage2Learner


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="cuda, cpu or auto")
    parser.add_argument("--z-dim", type=int, default=2048, help="RL token size D")
    parser.add_argument("--proprio-dim", type=int, default=9)
    parser.add_argument("--action-dim", type=int, default=8)
    parser.add_argument("--chunk-len", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--replay-size", type=int, default=5000)
    parser.add_argument("--updates", type=int, default=2000, help="timed updates per learner")
    parser.add_argument("--warmup", type=int, default=50, help="untimed updates first")
    return parser.parse_args()


def random_transition(rng: np.random.Generator, dims: RLTDims, chunk_len: int) -> RLTTransition:
    def uniform(*shape: int) -> np.ndarray:
        return rng.uniform(-1, 1, shape).astype(np.float32)

    return RLTTransition(
        z_rl=uniform(dims.z_dim),
        proprio=uniform(dims.proprio_dim),
        ref_chunk=uniform(dims.ref_chunk_len, dims.action_dim),
        action=uniform(chunk_len, dims.action_dim),
        rewards=(rng.uniform(size=chunk_len) < 0.05).astype(np.float32),
        next_z_rl=uniform(dims.z_dim),
        next_proprio=uniform(dims.proprio_dim),
        next_ref_chunk=uniform(dims.ref_chunk_len, dims.action_dim),
        done=bool(rng.uniform() < 0.02),
        intervened=np.zeros(chunk_len, bool),
    )


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def stage2_updates_per_s(
    args, dims, transitions, device, critic_actor_ratio, cuda_graphs=True
) -> float:
    config = Stage2Config(
        chunk_len=args.chunk_len,
        batch_size=args.batch_size,
        replay_capacity=len(transitions),
        sample_window=len(transitions),
        critic_actor_ratio=critic_actor_ratio,
        cuda_graphs=cuda_graphs,
        device=str(device),
    )
    learner = Stage2Learner(config, dims)
    learner.add_transitions(transitions)
    learner.run_updates(args.warmup)
    synchronize(device)
    start = time.perf_counter()
    learner.run_updates(args.updates)
    synchronize(device)
    return args.updates / (time.perf_counter() - start)


def sb3_sac_updates_per_s(args, dims, transitions, device) -> float:
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import configure

    obs_dim = dims.z_dim + dims.proprio_dim + dims.ref_chunk_len * dims.action_dim
    action_dim = args.chunk_len * dims.action_dim

    class RLTFeatureEnv(gym.Env):
        """Only supplies the spaces; SAC trains from the filled replay buffer."""

        observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)

    model = SAC(
        "MlpPolicy",
        RLTFeatureEnv(),
        batch_size=args.batch_size,
        buffer_size=len(transitions),
        learning_starts=0,
        policy_kwargs={"net_arch": [256, 256, 256], "activation_fn": torch.nn.Tanh},
        device=device,
    )
    model.set_logger(configure(folder=None, format_strings=[]))
    for item in transitions:
        obs = np.concatenate([item.z_rl, item.proprio, item.ref_chunk.ravel()])
        next_obs = np.concatenate([item.next_z_rl, item.next_proprio, item.next_ref_chunk.ravel()])
        action, reward, done = item.action.ravel(), item.rewards.sum(), item.done
        model.replay_buffer.add(
            obs[None], next_obs[None], action[None], np.array([reward]), np.array([done]), [{}]
        )
    model.train(gradient_steps=args.warmup, batch_size=args.batch_size)
    synchronize(device)
    start = time.perf_counter()
    model.train(gradient_steps=args.updates, batch_size=args.batch_size)
    synchronize(device)
    return args.updates / (time.perf_counter() - start)


def main() -> None:
    args = parse_args()
    device = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    )
    dims = RLTDims(args.z_dim, args.proprio_dim, args.chunk_len, args.action_dim)
    rng = np.random.default_rng(0)
    transitions = [random_transition(rng, dims, args.chunk_len) for _ in range(args.replay_size)]
    rates = {"critic:actor 4": stage2_updates_per_s(args, dims, transitions, device, 4)}
    if device.type == "cuda":
        rates["critic:actor 4, eager"] = stage2_updates_per_s(
            args, dims, transitions, device, 4, cuda_graphs=False
        )
    rates["critic:actor 1"] = stage2_updates_per_s(args, dims, transitions, device, 1)
    sac = sb3_sac_updates_per_s(args, dims, transitions, device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device={name} torch={torch.__version__} dims={dataclasses.asdict(dims)}")
    print(f"batch={args.batch_size} timed_updates={args.updates} warmup={args.warmup}")
    for label, rate in rates.items():
        print(f"stage2 ({label:21s}) updates/s = {rate:9.1f}  x{rate / sac:.2f} SB3 SAC")
    print(f"SB3 SAC {'':24s} updates/s = {sac:9.1f}")


if __name__ == "__main__":
    main()
