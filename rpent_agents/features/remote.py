"""Feature models over the network: the client of a feature server (`features.server`).

`rpent-feature-server` (`features.server`) featurizes on a GPU box; `RemoteFeatureModel(host,
port)` (openpi-client) asks it from the robot PC, and offers `rlt_features` (what
`wrappers.RLTObservation` needs) and `featurize` (the `FeatureModel` protocol). Each request is
a batch: `observations` (dict of stacked arrays: `image`, `wrist_image`, `state`),
`instructions` (list of str) and `want` ("z_rl" or "prefix"); the reply holds `z_rl` or the
prefix tokens, pad mask and image token count, plus `ref_chunk` (env units). The metadata sent
on connect (`rpent_feature_server`, `z_dim`, `prefix_dim`, `chunk_len`, `action_dim`) tells the
client what it talks to. A request the featurizer refuses (an observation holding NaN or inf, a
model output holding one: `RLTFeaturizer`) gets the reply `{"error": message}`, which the client
raises as `FeatureServerError`; the connection stays open and the server serves on.

Against a stock OpenPI policy server, which returns actions only, `reference_chunk` works
(OpenPI observation keys) and asking for `z_rl` or prefix tokens raises `FeatureServerError`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rpent_agents.features.protocol import PrefixFeatures, RLTFeatures

SERVER_KIND = "rpent_feature_server"
OBSERVATION_KEYS = ("image", "wrist_image", "state")
OPENPI_KEYS = {"image": "observation/image", "wrist_image": "observation/wrist_image"}
ERROR_KEY = "error"


class FeatureServerError(RuntimeError):
    """The server cannot give what was asked, or refused the request.

    E.g. z_rl from an actions-only OpenPI server, or a request holding NaN or inf.
    """


def require_remote_extra(module: str) -> None:
    """Import `module` (of openpi-client or the `remote` extra), or raise how to install it.

    Raises:
        ImportError: Naming the `remote` extra's install commands.
    """
    try:
        __import__(module)
    except ImportError as error:
        raise ImportError(
            f"{module} is missing ({error}); install the remote extra: pip install 'rpent[remote]'"
            " && pip install --no-deps openpi-client==0.1.2"
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
        require_remote_extra("openpi_client")
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
        # the server's own milliseconds for the last request (its model thread's call): the
        # rest of a call's time is the round trip (serialisation, the socket, the queue)
        self.last_server_infer_ms: float | None = None

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
        self.last_server_infer_ms = reply.get("server_timing", {}).get("infer_ms")
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
