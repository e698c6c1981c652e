"""The franky-sim harness (tests/franky_sim.py) for the Franka env tests."""

from franky_sim import start_sim  # noqa: F401  (a fixture)
