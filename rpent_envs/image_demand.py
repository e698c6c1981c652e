"""Image demand: a camera env renders only the steps whose images somebody reads.

An action chunk runs H steps open loop and only the observation after its last step is read
(a feature model turns it into the next chunk), yet a camera env would render both cameras at
every step. An env that can skip rendering owns an `ImageDemand` (`env.unwrapped.image_demand`)
and this is the contract between it and the wrappers above:

- By default every step renders, so an env used step by step behaves as any Gymnasium env.
- A chunk executor (`wrappers.chunking.execute_chunk`) marks the steps whose observation it
  will not read: `with demand.optional(): env.step(action)`.
- A wrapper that reads the images of every step (e.g. `RecordTrajectory`, which stores each
  pre-action observation) *holds* the demand, `demand.hold(self)`, until it closes
  (`demand.release(self)`): while anything holds it, optional steps render too.
- On a step that skipped rendering, the image arrays of the observation are zeros (the
  observation stays in the observation space) and `info["images_rendered"]` is False.
- `demand.observe_now()` returns the env's current observation with its images rendered: the
  executor calls it when an episode ended on a skipped step, so the chunk's final observation
  always has real images.

Example:
    >>> env = gym.make("RPent/PegInsertionSideWideClearance-v1", image_size=64)
    >>> demand = image_demand_of(env)
    >>> obs, info = env.reset(seed=0)
    >>> with demand.optional():
    ...     obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    >>> info["images_rendered"], int(obs["image"].max())
    (False, 0)
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym


class ImageDemand:
    """Who needs the images of the next steps; owned by an env that can skip rendering.

    Attributes:
        observe_now: The env's callable that renders and returns its current observation.
    """

    def __init__(self, observe_now: Callable[[], Any]) -> None:
        """Create the demand of one env.

        Args:
            observe_now: Renders and returns the env's current observation (images included).
        """
        self.observe_now = observe_now
        # Weak: a consumer dropped without release() stops holding the demand.
        self._holders: weakref.WeakSet[object] = weakref.WeakSet()
        self._optional_depth = 0

    @property
    def held(self) -> bool:
        """Whether a consumer of every step's images holds the demand."""
        return len(self._holders) > 0

    def hold(self, consumer: object) -> None:
        """Every step renders until `consumer` releases the demand (idempotent)."""
        self._holders.add(consumer)

    def release(self, consumer: object) -> None:
        """Drop the hold of `consumer` (a no-op when it holds none)."""
        self._holders.discard(consumer)

    @contextlib.contextmanager
    def optional(self) -> Iterator[None]:
        """Steps taken inside may skip rendering (unless the demand is held)."""
        self._optional_depth += 1
        try:
            yield
        finally:
            self._optional_depth -= 1

    def skips_rendering(self) -> bool:
        """Whether the step about to run may leave its images unrendered."""
        return self._optional_depth > 0 and len(self._holders) == 0


def image_demand_of(env: gym.Env) -> ImageDemand | None:
    """The `ImageDemand` of the env at the bottom of `env`'s stack; None when it has none."""
    return getattr(env.unwrapped, "image_demand", None)
