"""Feature models over the network: a GPU box serves featurization to a robot PC.

Server: `rpent-feature-server --checkpoint CKPT --port 8000` hosts a Stage 1 checkpoint with
`openpi_server.WebsocketPolicyServer` (OpenPI's websocket + msgpack-numpy protocol);
`--pi05-checkpoint CKPT --tokenizer-dir TOK` hosts pi0.5 instead (prefix tokens and reference
chunks; its fast path's `--batch-buckets`, `--compile-cache-dir`, `--prompt-slots`, and
`--no-warm-up` to skip compiling every bucket before it listens). Each request is a batch:
`observations` (dict of stacked arrays: `image`, `wrist_image`, `state`), `instructions` (list
of str) and `want` ("z_rl" or "prefix"); the reply holds `z_rl` or the prefix tokens, pad mask
and image token count, plus `ref_chunk` (env units). The metadata sent on connect
(`rpent_feature_server`, `z_dim`, `prefix_dim`, `chunk_len`, `action_dim`) tells the client what
it talks to. A request the featurizer refuses (an observation holding NaN or inf, a model output
holding one: `RLTFeaturizer`) gets the reply `{"error": message}`, which the client raises as
`FeatureServerError`; the connection stays open and the server serves on.

Client: `RemoteFeatureModel(host, port)` (openpi-client) offers `rlt_features` (what
`wrappers.RLTObservation` needs) and `featurize` (the `FeatureModel` protocol). Against a stock
OpenPI policy server, which returns actions only, `reference_chunk` works (OpenPI observation
keys) and asking for `z_rl` or prefix tokens raises `FeatureServerError`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import tyro

from rpent_agents.common.cli import command
from rpent_agents.features.buckets import BATCH_BUCKETS
from rpent_agents.features.protocol import PrefixFeatures, RLTFeatures, RLTFeaturizer

logger = logging.getLogger(__name__)
SERVER_KIND = "rpent_feature_server"
OBSERVATION_KEYS = ("image", "wrist_image", "state")
OPENPI_KEYS = {"image": "observation/image", "wrist_image": "observation/wrist_image"}


ERROR_KEY = "error"


class FeatureServerError(RuntimeError):
    """The server cannot give what was asked, or refused the request.

    E.g. z_rl from an actions-only OpenPI server, or a request holding NaN or inf.
    """


def _require_openpi(module: str) -> None:
    try:
        __import__(module)
    except ImportError as error:
        raise ImportError(
            f"{module} is missing ({error}); install the remote extra: pip install 'rpent[remote]'"
            " && pip install --no-deps openpi-client==0.1.2 openpi-server==0.1.0"
        ) from error


def stack_observations(observations: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Raw observations -> one dict of batched arrays (what goes over the wire)."""
    return {
        key: np.stack([np.asarray(obs[key]) for obs in observations]) for key in OBSERVATION_KEYS
    }


def unstack_observations(batch: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """The inverse of `stack_observations`."""
    count = len(batch["state"])
    return [
        {key: np.asarray(batch[key][index]) for key in OBSERVATION_KEYS} for index in range(count)
    ]


class FeatureServerPolicy:
    """The server side: an OpenPI `BasePolicy` whose `infer` featurizes a batch.

    Example:
        >>> policy = FeatureServerPolicy(load_featurizer(checkpoint, device="cuda"))
        >>> WebsocketPolicyServer(policy, port=8000, metadata=policy.metadata).serve_forever()
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
        """Featurize the request's batch; a refused one gets `{"error": why}` (module doc)."""
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


class RemoteFeatureModel:
    """Client of a feature server (or of a stock OpenPI policy server, for chunks only).

    Example:
        >>> remote = RemoteFeatureModel("127.0.0.1", 8000)
        >>> env = RLTObservation(gym.make(...), remote, chunk_len=10)
    """

    def __init__(self, host: str, port: int, connect_timeout_s: float = 30.0) -> None:
        """Connect to ws://host:port, retrying until `connect_timeout_s` has passed.

        Raises:
            ConnectionError: When no server answered in time.
        """
        _require_openpi("openpi_client")
        from openpi_client.websocket_client_policy import WebsocketClientPolicy

        deadline = time.monotonic() + connect_timeout_s
        while True:
            try:
                self._client = WebsocketClientPolicy(host, port)
                break
            except OSError as error:
                if time.monotonic() > deadline:
                    raise ConnectionError(
                        f"no server at ws://{host}:{port} after {connect_timeout_s} s: {error}"
                    ) from error
                time.sleep(0.2)
        self.address = f"ws://{host}:{port}"
        self.metadata = dict(self._client.get_server_metadata())
        self.is_feature_server = bool(self.metadata.get(SERVER_KIND))
        self.z_dim = self.metadata.get("z_dim")
        self.prefix_dim = self.metadata.get("prefix_dim")
        self.chunk_len = self.metadata.get("chunk_len")
        self.action_dim = self.metadata.get("action_dim")
        self.device = torch.device("cpu")

    def _request(self, observations, instructions, want: str) -> dict:
        if not self.is_feature_server:
            raise FeatureServerError(
                f"{self.address} is a stock OpenPI policy server (actions only): it cannot give"
                f" {want}; serve the model with rpent-feature-server, or use reference_chunk()"
            )
        request = {
            "observations": stack_observations(observations),
            "instructions": list(instructions),
            "want": want,
        }
        reply = self._client.infer(request)
        if ERROR_KEY in reply:
            raise FeatureServerError(f"{self.address} refused the request: {reply[ERROR_KEY]}")
        return reply

    def rlt_features(
        self, observations: Sequence[Mapping[str, Any]], instructions: Sequence[str]
    ) -> RLTFeatures:
        """`z_rl` and the reference chunk, computed on the server."""
        reply = self._request(observations, instructions, "z_rl")
        return RLTFeatures(
            z_rl=np.asarray(reply["z_rl"], np.float32),
            ref_chunk=np.asarray(reply["ref_chunk"], np.float32),
        )

    def featurize(
        self, observations: Sequence[Mapping[str, Any]], instructions: Sequence[str]
    ) -> PrefixFeatures:
        """Prefix tokens, pad mask and reference chunk, computed on the server."""
        reply = self._request(observations, instructions, "prefix tokens")
        return PrefixFeatures(
            prefix_tokens=torch.from_numpy(np.array(reply["prefix_tokens"])),
            pad_mask=torch.from_numpy(np.array(reply["pad_mask"])),
            ref_chunk=torch.from_numpy(np.array(reply["ref_chunk"])),
            image_token_count=int(reply["image_token_count"]),
        )

    def reference_chunk(self, observation: Mapping[str, Any], instruction: str) -> np.ndarray:
        """The chunk (H, A) for one observation; works with a stock OpenPI server too."""
        if self.is_feature_server:
            return self.rlt_features([observation], [instruction]).ref_chunk[0]
        request = {openpi: np.asarray(observation[raw]) for raw, openpi in OPENPI_KEYS.items()}
        request["observation/state"] = np.asarray(observation["state"], np.float32)
        request["prompt"] = instruction
        return np.asarray(self._client.infer(request)["actions"], np.float32)

    def close(self) -> None:
        """Close the websocket (openpi-client 0.1.2 offers no close of its own)."""
        self._client._ws.close()


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
    batch_buckets: tuple[int, ...] = BATCH_BUCKETS
    """pi0.5 fast path: the batch sizes compiled, each once (fewer: a shorter first start)."""
    compile_cache_dir: Path | None = None
    """pi0.5 fast path: compile cache root; default $RPENT_COMPILE_CACHE_DIR, else
    ~/.cache/rpent/compile."""
    prompt_slots: int | None = None
    """pi0.5: prompt token slots kept of the tokenizer's 200 (default all); a shorter prefix
    for the same features when prompts fit, and a request whose prompt does not gets an
    error."""
    warm_up: bool = True
    """pi0.5 fast path: compile (or load from the compile cache) every bucket before serving; a
    bucket compiled inside a request blocks the websocket's keepalive pings past the client's
    20 s timeout, which closes the connection."""


def main() -> None:
    """Entry point of `rpent-feature-server`."""
    with command("rpent-feature-server"):
        _serve(tyro.cli(ServeArgs))


def _serve(args: ServeArgs) -> None:
    logging.getLogger().setLevel(args.log_level)
    _require_openpi("openpi_server")
    from openpi_server import WebsocketPolicyServer

    from rpent_agents.features.checkpoint import load_featurizer

    if args.pi05_checkpoint is not None:
        policy = FeatureServerPolicy(pi05_featurizer(args))
    else:
        policy = FeatureServerPolicy(load_featurizer(args.checkpoint, args.device))
    served = args.pi05_checkpoint or args.checkpoint or "the default"
    logger.info("serving %s on ws://%s:%d", served, args.host, args.port)
    WebsocketPolicyServer(
        policy, host=args.host, port=args.port, metadata=policy.metadata
    ).serve_forever()


def pi05_featurizer(args: ServeArgs) -> RLTFeaturizer:
    """The pi0.5 model of `args` without an RL token, warmed up when `args.warm_up`.

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
        args.pi05_checkpoint,
        args.tokenizer_dir,
        args.device,
        batch_buckets=args.batch_buckets,
        compile_cache_dir=args.compile_cache_dir,
        prompt_slots=args.prompt_slots,
    )
    if args.warm_up:
        model.warm_up()
    return RLTFeaturizer(model, None)


if __name__ == "__main__":
    main()
