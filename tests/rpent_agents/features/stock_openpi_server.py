"""A stock-OpenPI-like policy server: actions only, no RPent metadata (for test_remote.py).

Usage: python stock_openpi_server.py PORT
"""

import sys

import numpy as np
from openpi_server import WebsocketPolicyServer


class ActionsOnlyPolicy:
    """Replies like an OpenPI policy: {"actions": (H, A)}; echoes the state into the chunk."""

    def infer(self, observation):
        assert set(observation) == {
            "observation/image",
            "observation/wrist_image",
            "observation/state",
            "prompt",
        }, sorted(observation)
        actions = np.zeros((10, 8), np.float32)
        actions[:, :8] = observation["observation/state"][:8]
        return {"actions": actions}

    def reset(self):
        pass


if __name__ == "__main__":
    WebsocketPolicyServer(
        ActionsOnlyPolicy(), host="127.0.0.1", port=int(sys.argv[1])
    ).serve_forever()
