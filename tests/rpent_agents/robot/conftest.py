"""The robot command's tests drive franky-sim (tests/franky_sim.py) with real keys (Xvfb)."""

from franky_sim import start_sim  # noqa: F401  (a fixture)
from x_display import xvfb_display  # noqa: F401  (a fixture)
