"""The operator's key source: key presses and held keys, from code or from the real keyboard.

`KeyPressQueue` is fed by code (a GUI button, a foot pedal driver, a test) or, as
`PynputKeySource`, by the real keyboard through pynput. One source feeds every consumer of the
operator's keys (`wrappers.triggers.KeyboardTrigger`, `wrappers.operator.OperatorOutcome`, the
teleop of `wrappers.teleop`) through subscribers, so one pynput listener serves them all.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KeyPress:
    """One key press: the key's character (or pynput name, e.g. "space") and when, in s."""

    key: str
    time_s: float


class KeyPressQueue:
    """Thread-safe queue of key presses and set of held keys: the key source of the operator.

    Anything can feed it (a GUI button, a foot pedal driver, a test); `PynputKeySource` feeds
    it from the real keyboard. One source can feed several consumers (`KeyboardTrigger`, the
    outcome keys, a teleop device): each takes a subscriber, `subscribe(keys)`, a queue that
    receives a copy of every later press and release of those keys, so no consumer takes
    presses meant for another. A subscriber's `start()`/`stop()` do nothing: the owner of the
    source starts and stops it. A queue nobody pops keeps its newest `MAX_PENDING_PRESSES`.

    Example:
        >>> presses = KeyPressQueue()
        >>> outcome_keys = presses.subscribe(["a", "c"])
        >>> presses.press("b")
        >>> presses.press("c")
        >>> [press.key for press in presses.pop_presses()], outcome_keys.pop_presses()[0].key
        (['b', 'c'], 'c')
        >>> sorted(presses.held_keys())
        ['b', 'c']
        >>> presses.release("b")
        >>> sorted(presses.held_keys()), sorted(outcome_keys.held_keys())
        (['c'], ['c'])
    """

    MAX_PENDING_PRESSES = 1000

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, keys: Collection[str] | None = None
    ) -> None:
        """Create an empty queue.

        Args:
            clock: Time source of presses given without a time (seconds, monotonic).
            keys: The keys this queue takes from its source (a subscriber); None: every key.
        """
        self._clock = clock
        self.keys = None if keys is None else frozenset(keys)
        self._lock = threading.Lock()
        self._presses: deque[KeyPress] = deque(maxlen=self.MAX_PENDING_PRESSES)
        self._held: set[str] = set()
        self._subscribers: list[KeyPressQueue] = []

    def start(self) -> None:
        """Begin listening (nothing to do for a queue fed by code)."""

    def stop(self) -> None:
        """Stop listening (nothing to do for a queue fed by code)."""

    def subscribe(self, keys: Collection[str] | None = None) -> KeyPressQueue:
        """A queue that receives a copy of every later press and release of `keys`.

        Args:
            keys: The keys to pass on; None: every key.

        Returns:
            The subscriber; its `start()` and `stop()` do nothing.
        """
        subscriber = KeyPressQueue(self._clock, keys)
        with self._lock:
            self._subscribers.append(subscriber)
        return subscriber

    def press(self, key: str, time_s: float | None = None) -> None:
        """Add a press of `key` at `time_s` (default: now); the key is held until released."""
        time_s = self._clock() if time_s is None else time_s
        with self._lock:
            self._presses.append(KeyPress(key, time_s))
            self._held.add(key)
        for subscriber in self._subscribers_of(key):
            subscriber.press(key, time_s)

    def release(self, key: str) -> None:
        """Record that `key` is no longer held.

        A character's release also releases its other case: Shift pressed or let go while the
        key was held changes the character reported.
        """
        with self._lock:
            self._held -= {key, key.swapcase()}
        for subscriber in self._subscribers_of(key) | self._subscribers_of(key.swapcase()):
            subscriber.release(key)

    def held_keys(self) -> frozenset[str]:
        """The keys pressed and not released since."""
        with self._lock:
            return frozenset(self._held)

    def pop_presses(self) -> list[KeyPress]:
        """Return and forget the presses since the last call, oldest first."""
        with self._lock:
            presses = list(self._presses)
            self._presses.clear()
        return presses

    def _subscribers_of(self, key: str) -> set[KeyPressQueue]:
        with self._lock:
            return {
                subscriber
                for subscriber in self._subscribers
                if subscriber.keys is None or key in subscriber.keys
            }


class KeyboardUnavailableError(RuntimeError):
    """pynput cannot listen to the keyboard here (no X display, no uinput permission)."""


class PynputKeySource(KeyPressQueue):
    """Key presses and releases of the real keyboard through pynput (imported on `start`).

    pynput needs an X display (`DISPLAY`) or its uinput backend (`PYNPUT_BACKEND=uinput`,
    with read access to /dev/input). Presses are time-stamped when pynput reports them. A key
    held down repeats its press (the keyboard's auto-repeat) without a release: a press of a
    key already held is such a repeat and is not queued, so holding a key is one press.
    """

    def __init__(self) -> None:
        """Create a source that listens from `start()` to `stop()`."""
        super().__init__()
        self._listener: Any = None

    def start(self) -> None:
        """Start pynput's listener thread; a no-op when already listening.

        Raises:
            KeyboardUnavailableError: When pynput is missing or has no keyboard backend.
        """
        if self._listener is not None:
            return
        keyboard = _import_pynput_keyboard()
        self._listener = keyboard.Listener(on_press=self._on_press, on_release=self._on_release)
        self._listener.start()
        self._listener.wait()

    def stop(self) -> None:
        """Stop listening and release every held key; presses after this are not queued.

        pynput's X listener thread (a daemon) exits at the next X input event, not at once,
        so this does not wait for it.
        """
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        for key in self.held_keys():
            self.release(key)

    def _on_press(self, key: Any) -> None:
        name = _key_name(key)
        if name and name not in self.held_keys():
            self.press(name)

    def _on_release(self, key: Any) -> None:
        name = _key_name(key)
        if name:
            self.release(name)


def _key_name(key: Any) -> str | None:
    """The name of a pynput key: its character, or its name ("space", "up", "page_up")."""
    return getattr(key, "char", None) or getattr(key, "name", None)


def _import_pynput_keyboard() -> Any:
    if importlib.util.find_spec("pynput") is None:
        raise KeyboardUnavailableError(
            "the keyboard (KeyboardTrigger, the operator's keys) needs pynput: install the "
            "keyboard extra "
            "(pip install 'rpent[keyboard]')"
        )
    try:
        from pynput import keyboard
    except ImportError as error:
        raise KeyboardUnavailableError(
            f"pynput cannot listen to the keyboard ({error}). Set DISPLAY to a running X server "
            "(e.g. DISPLAY=:0, or run `Xvfb :99 &` and set DISPLAY=:99), or use pynput's uinput "
            "backend: PYNPUT_BACKEND=uinput, run as root or as a member of the `input` group "
            "(read access to /dev/input/event*)."
        ) from error
    return keyboard
