"""Messages between an env and its worker process: a JSON header plus raw array bytes.

Both sides import this module: the parent as `rpent_envs.subprocess_env.wire`, the worker
(another interpreter, maybe Python 3.10/3.11 with numpy 1.x) as a plain top-level module next
to `worker.py`. It therefore uses only the standard library and numpy, and no syntax newer
than Python 3.10.

A message is a tree of dicts (str keys), lists, tuples, str, int, float, bool, None and numpy
arrays or scalars. Arrays never go through JSON: the header holds their dtype and shape and
their bytes follow the header unchanged, so a camera image costs one memory copy per side.

Frame layout: 8-byte big-endian header length, the UTF-8 JSON header (the tree, where each
array is `{"__ndarray__": index}`, and the dtype, shape and byte count of each array), then
the array bytes back to back.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

import numpy as np

ARRAY_TAG = "__ndarray__"
_LENGTH = struct.Struct("!Q")
MAX_HEADER_BYTES = 64 * 1024 * 1024


class ChannelClosedError(ConnectionError):
    """The other end closed the connection (its process exited or closed the socket)."""


class ChannelTimeoutError(TimeoutError):
    """No complete message arrived before the deadline."""


def _to_tree(value: Any, buffers: list[np.ndarray], path: str) -> Any:
    """Copy `value` into a JSON-able tree, moving arrays to `buffers`."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError(f"{path}: arrays of Python objects cannot be sent; use numbers")
        buffers.append(np.asarray(value, order="C"))  # ascontiguousarray makes 0-d 1-d
        return {ARRAY_TAG: len(buffers) - 1}
    if isinstance(value, dict):
        tree = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: dict key {key!r} is not a str; use str keys")
            tree[key] = _to_tree(item, buffers, f"{path}.{key}")
        return tree
    if isinstance(value, (list, tuple)):
        return [_to_tree(item, buffers, f"{path}[{index}]") for index, item in enumerate(value)]
    raise TypeError(
        f"{path}: {type(value).__name__} cannot be sent to or from a worker; use dicts, "
        "lists, str, numbers, bools, None and numpy arrays"
    )


def _from_tree(tree: Any, arrays: list[np.ndarray]) -> Any:
    """Rebuild the value `_to_tree` encoded, taking arrays from `arrays`."""
    if isinstance(tree, dict):
        if len(tree) == 1 and ARRAY_TAG in tree:
            return arrays[tree[ARRAY_TAG]]
        return {key: _from_tree(item, arrays) for key, item in tree.items()}
    if isinstance(tree, list):
        return [_from_tree(item, arrays) for item in tree]
    return tree


def encode(message: Any) -> list[memoryview]:
    """Frame `message` as a list of byte views to send in order.

    Raises:
        TypeError: A value of the message cannot be sent (its path is in the message).
    """
    buffers: list[np.ndarray] = []
    tree = _to_tree(message, buffers, "message")
    arrays = [[array.dtype.str, list(array.shape), array.nbytes] for array in buffers]
    header = {"tree": tree, "arrays": arrays}
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    frames = [memoryview(_LENGTH.pack(len(header_bytes))), memoryview(header_bytes)]
    frames.extend(memoryview(array.reshape(-1).view(np.uint8)) for array in buffers if array.size)
    return frames


class Channel:
    """One end of a framed, bidirectional connection over a stream socket.

    Example:
        >>> import socket
        >>> left, right = socket.socketpair()
        >>> Channel(left).send({"image": np.zeros((2, 2, 3), np.uint8)})
        >>> Channel(right).receive(timeout_s=1.0)["image"].shape
        (2, 2, 3)
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, message: Any) -> None:
        """Send one message; blocks until the socket has taken all of it."""
        self.send_frames(encode(message))

    def send_frames(self, frames: list[memoryview]) -> None:
        """Send a message that `encode` framed."""
        self.sock.settimeout(None)
        for frame in frames:
            self.sock.sendall(frame)

    def receive(self, timeout_s: float | None = None) -> Any:
        """Wait for one whole message.

        Args:
            timeout_s: Seconds to wait for the complete message; None waits forever.

        Raises:
            ChannelTimeoutError: The deadline passed first.
            ChannelClosedError: The other end closed the connection.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        (header_length,) = _LENGTH.unpack(self._read_exactly(_LENGTH.size, deadline))
        if header_length > MAX_HEADER_BYTES:
            raise ChannelClosedError(f"corrupt frame: header of {header_length} bytes")
        header = json.loads(self._read_exactly(header_length, deadline).decode("utf-8"))
        arrays = [
            np.frombuffer(self._read_exactly(nbytes, deadline), dtype=dtype).reshape(shape)
            for dtype, shape, nbytes in header["arrays"]
        ]
        return _from_tree(header["tree"], arrays)

    def _read_exactly(self, nbytes: int, deadline: float | None) -> bytearray:
        data = bytearray(nbytes)
        view = memoryview(data)
        received = 0
        while received < nbytes:
            if deadline is None:
                self.sock.settimeout(None)
            else:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    raise ChannelTimeoutError("no complete message before the deadline")
                self.sock.settimeout(remaining_s)
            try:
                count = self.sock.recv_into(view[received:], nbytes - received)
            except TimeoutError as error:
                raise ChannelTimeoutError("no complete message before the deadline") from error
            except (ConnectionResetError, BrokenPipeError) as error:
                raise ChannelClosedError("the connection was reset") from error
            if count == 0:
                raise ChannelClosedError("the other end closed the connection")
            received += count
        return data

    def close(self) -> None:
        """Close this end; the other end's next receive raises `ChannelClosedError`."""
        self.sock.close()


def describe_space(space: Any) -> dict[str, Any]:
    """A plain description of a Gymnasium space (0.29 or 1.x), for `build_space` to rebuild.

    The worker side cannot share space objects with the parent (other Gymnasium version), so
    spaces travel as their defining parameters.

    Raises:
        TypeError: The space type has no description (Box, Discrete, MultiBinary,
            MultiDiscrete, Text, Dict and Tuple do).
    """
    kind = type(space).__name__
    if kind == "Box":
        return {"type": kind, "low": space.low, "high": space.high, "dtype": space.dtype.str}
    if kind == "Discrete":
        return {"type": kind, "n": int(space.n), "start": int(space.start)}
    if kind == "MultiBinary":
        return {"type": kind, "n": np.asarray(space.n).tolist()}
    if kind == "MultiDiscrete":
        return {"type": kind, "nvec": space.nvec, "dtype": space.dtype.str}
    if kind == "Text":
        charset = "".join(sorted(space.character_set))
        lengths = {"min_length": space.min_length, "max_length": space.max_length}
        return {"type": kind, "charset": charset, **lengths}
    if kind == "Dict":
        return {"type": kind, "spaces": {key: describe_space(sub) for key, sub in space.items()}}
    if kind == "Tuple":
        return {"type": kind, "spaces": [describe_space(sub) for sub in space.spaces]}
    raise TypeError(
        f"space {space!r} cannot be described for another process: use Box, Discrete, "
        "MultiBinary, MultiDiscrete, Text, Dict or Tuple"
    )
