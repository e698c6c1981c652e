"""The feature server, `rpent-feature-server`: a GPU box featurizes for a robot PC.

`rpent-feature-server --checkpoint CKPT --port 8000` serves a Stage 1 checkpoint;
`--pi05-checkpoint CKPT --tokenizer-dir TOK` serves pi0.5 instead (prefix tokens and reference
chunks; `--warm-up`, and every `PI05Options` field as a flag of its own: `--batch-buckets`,
`--dynamic-batch`, `--compile-cache-dir`, `--prompt-slots`, ...). It speaks OpenPI's websocket
protocol (msgpack-numpy frames): on connect it sends its metadata (`rpent_feature_server`,
`z_dim`, `prefix_dim`, `chunk_len`, `action_dim`), then answers each request frame with one
reply frame, and `GET /healthz` answers "OK", so openpi-client and `RemoteFeatureModel`
(`features.remote`, where the request and reply are described) both talk to it.

Every model call, warm-ups included, runs on one model thread; the connections live on an
asyncio loop in another. So the loop answers the websocket's keepalive pings and `/healthz`
while a call runs: a bucket that compiles, or loads from the compile cache, inside a request no
longer closes the client's connection (websockets' 20 s ping timeout), and the server can
listen once its first bucket is ready (`--warm-up first`, the default). One thread also keeps a
compiled model's CUDA graphs replaying in the thread that recorded them (torch 2.11:
pytorch/pytorch#123177). Requests are answered one at a time, in the order they came.

Example:
    >>> build = lambda: FeatureServerPolicy(load_featurizer(checkpoint, device="cuda"))
    >>> FeatureServer(build, port=8000).serve_forever()
"""

from __future__ import annotations

import asyncio
import functools
import http
import logging
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
import tyro

from rpent_agents.common.cli import command
from rpent_agents.features.pi05_options import PI05Options
from rpent_agents.features.protocol import RLTFeaturizer
from rpent_agents.features.remote import (
    ERROR_KEY,
    SERVER_KIND,
    require_remote_extra,
    unstack_observations,
)

logger = logging.getLogger(__name__)
HEALTH_PATH = "/healthz"
# Which buckets a pi0.5 server warms up before it listens (`ServeArgs.warm_up`)
WarmUp = Literal["first", "all", "none"]


class FeatureServerPolicy:
    """What the server runs per request: featurize a batch (an OpenPI `BasePolicy`).

    Example:
        >>> policy = FeatureServerPolicy(load_featurizer(checkpoint, device="cuda"))
        >>> policy.infer({"observations": batch, "instructions": ["insert the peg"]})
    """

    def __init__(self, featurizer: RLTFeaturizer) -> None:
        """Serve `featurizer` (a feature model with its RL token)."""
        self.featurizer = featurizer
        self.metadata = {
            SERVER_KIND: True,
            "z_dim": featurizer.z_dim,
            "prefix_dim": featurizer.feature_model.prefix_dim,
            "chunk_len": featurizer.chunk_len,
            "action_dim": featurizer.action_dim,
        }

    @torch.no_grad()
    def infer(self, request: dict) -> dict:
        """Featurize the request's batch; a refused one gets `{"error": why}`."""
        try:
            return self._featurize(request)
        except ValueError as error:  # the featurizer refused the request; serve the next one
            logger.warning("refused a request: %s", error)
            return {ERROR_KEY: str(error)}

    def _featurize(self, request: dict) -> dict:
        observations = unstack_observations(request["observations"])
        instructions = list(request["instructions"])
        if request.get("want", "z_rl") == "z_rl":
            features = self.featurizer.rlt_features(observations, instructions)
            return {"z_rl": features.z_rl, "ref_chunk": features.ref_chunk}
        prefix = self.featurizer.prefix_features(observations, instructions)
        return {
            "prefix_tokens": prefix.prefix_tokens.float().cpu().numpy(),
            "pad_mask": prefix.pad_mask.cpu().numpy(),
            "ref_chunk": prefix.ref_chunk.float().cpu().numpy(),
            "image_token_count": np.int64(prefix.image_token_count),
        }

    def reset(self) -> None:
        """Nothing to reset: featurization keeps no state between requests."""


class FeatureServer:
    """A websocket server whose model work all runs on one model thread (module doc).

    The policy is built on that thread too (model load, warm-up): a process whose main thread
    had also run torch's CPU kernels ran a small model at half speed on 2 cores (two OpenMP
    pools: 38 against 19 ms a call), so the loop's thread leaves torch alone.

    Attributes:
        build_policy: Makes what each request runs (loads the model, warms it up).
        host: Interface it listens on.
        port: Its TCP port.
    """

    def __init__(
        self,
        build_policy: Callable[[], FeatureServerPolicy],
        host: str = "127.0.0.1",
        port: int = 8000,
    ) -> None:
        """Serve the policy `build_policy` makes, on ws://host:port once it is built."""
        self.build_policy = build_policy
        self.host = host
        self.port = port

    def serve_forever(self) -> None:
        """Build the policy on the model thread, then listen and answer until killed."""
        for module in ("openpi_client", "websockets.asyncio.server"):
            require_remote_extra(module)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rpent-model") as model_thread:
            policy = model_thread.submit(self.build_policy).result()
            asyncio.run(self._serve(model_thread, policy))

    async def _serve(self, model_thread: ThreadPoolExecutor, policy: FeatureServerPolicy) -> None:
        from websockets.asyncio.server import serve

        handler = functools.partial(self._answer, model_thread, policy)
        async with serve(
            handler,
            self.host,
            self.port,
            compression=None,
            max_size=None,
            process_request=_health_check,
        ) as server:
            logger.info("listening on ws://%s:%d", self.host, self.port)
            await server.serve_forever()

    async def _answer(
        self, model_thread: ThreadPoolExecutor, policy: FeatureServerPolicy, connection: Any
    ) -> None:
        """One connection: the metadata, then a reply per request until the client closes."""
        from openpi_client import msgpack_numpy
        from websockets.exceptions import ConnectionClosed
        from websockets.frames import CloseCode

        packer = msgpack_numpy.Packer()
        loop = asyncio.get_running_loop()
        try:
            await connection.send(packer.pack(policy.metadata))
            async for frame in connection:
                request = msgpack_numpy.unpackb(frame)
                started = time.monotonic()
                try:
                    reply = await loop.run_in_executor(model_thread, policy.infer, request)
                except Exception:  # a bug: the client gets the traceback, as OpenPI's server does
                    logger.exception("a request failed")
                    await connection.send(traceback.format_exc())
                    await connection.close(CloseCode.INTERNAL_ERROR, "internal server error")
                    return
                reply["server_timing"] = {"infer_ms": (time.monotonic() - started) * 1000}
                await connection.send(packer.pack(reply))
        except ConnectionClosed:
            logger.info("connection from %s closed", connection.remote_address)


def _health_check(connection: Any, request: Any) -> Any:
    """`GET /healthz` answers 200 "OK"; other paths go on to the websocket handshake."""
    if request.path == HEALTH_PATH:
        return connection.respond(http.HTTPStatus.OK, "OK\n")
    return None


@dataclass
class ServeArgs:
    """Serve a Stage 1 checkpoint's featurization (or pi0.5's) over a websocket (OpenPI)."""

    checkpoint: Path | None = None
    """Stage 1 checkpoint folder; default: the embedded one."""
    host: str = "127.0.0.1"
    """Interface to listen on (0.0.0.0 for every interface)."""
    port: int = 8000
    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")
    log_level: Literal["INFO", "WARNING"] = "INFO"
    pi05_checkpoint: Path | None = None
    """A LeRobot pi0.5 checkpoint folder (extra `pi`) served instead: prefix tokens and
    reference chunks (no RL token is trained on pi0.5, so a z_rl request gets an error)."""
    tokenizer_dir: Path | None = None
    """The local PaliGemma tokenizer folder of --pi05-checkpoint."""
    pi05: Annotated[PI05Options, tyro.conf.OmitArgPrefixes] = field(default_factory=PI05Options)
    """How pi0.5 runs (`PI05Options`: fast path, buckets, compile cache, ...); a request whose
    prompt does not fit `--prompt-slots` gets an error."""
    warm_up: WarmUp = "first"
    """pi0.5 fast path: the buckets compiled (or loaded from the compile cache) before the
    server listens: the smallest, every one, or none; the others on their first request (that
    request waits for it, the connection stays open)."""


def main() -> None:
    """Entry point of `rpent-feature-server`."""
    with command("rpent-feature-server"):
        _serve(tyro.cli(ServeArgs))


def _serve(args: ServeArgs) -> None:
    logging.getLogger().setLevel(args.log_level)
    served = args.pi05_checkpoint or args.checkpoint or "the default"
    logger.info("serving %s on ws://%s:%d", served, args.host, args.port)
    FeatureServer(functools.partial(build_policy, args), args.host, args.port).serve_forever()


def build_policy(args: ServeArgs) -> FeatureServerPolicy:
    """The featurizer `args` names, loaded and (pi0.5's buckets of `args.warm_up`) warmed up."""
    from rpent_agents.features.checkpoint import load_featurizer

    if args.pi05_checkpoint is None:
        return FeatureServerPolicy(load_featurizer(args.checkpoint, args.device))
    featurizer = pi05_featurizer(args)
    if sizes := warm_up_sizes(args.pi05.batch_buckets, args.warm_up):
        featurizer.feature_model.warm_up(sizes)
    return FeatureServerPolicy(featurizer)


def warm_up_sizes(batch_buckets: Sequence[int], warm_up: WarmUp) -> list[int]:
    """The batch sizes a server warms up before it listens (`ServeArgs.warm_up`), smallest first.

    Example:
        >>> warm_up_sizes((1, 8, 64), "first"), warm_up_sizes((1, 8, 64), "none")
        ([1], [])
    """
    buckets = sorted(batch_buckets)
    return {"first": buckets[:1], "all": buckets, "none": []}[warm_up]


def pi05_featurizer(args: ServeArgs) -> RLTFeaturizer:
    """The pi0.5 model of `args` without an RL token (not warmed up yet).

    Raises:
        ValueError: When `tokenizer_dir` is missing or a Stage 1 checkpoint is also given.
    """
    if args.tokenizer_dir is None or args.checkpoint is not None:
        raise ValueError(
            "--pi05-checkpoint needs --tokenizer-dir (a local PaliGemma tokenizer folder) and"
            " no --checkpoint (that one is a Stage 1 checkpoint)"
        )
    from rpent_agents.features.pi05 import PI05FeatureModel

    model = PI05FeatureModel.from_checkpoint(
        args.pi05_checkpoint, args.tokenizer_dir, args.device, args.pi05
    )
    return RLTFeaturizer(model, None)


if __name__ == "__main__":
    main()
