"""Out-of-process Gymnasium envs: a simulator in a worker process with its own interpreter."""

from rpent_envs.subprocess_env.env import (
    RemoteError,
    SubprocessEnv,
    SubprocessEnvError,
    WorkerDiedError,
    WorkerTimeoutError,
)

__all__ = [
    "RemoteError",
    "SubprocessEnv",
    "SubprocessEnvError",
    "WorkerDiedError",
    "WorkerTimeoutError",
]
