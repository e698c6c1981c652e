"""Shared fixtures: real simulators, small images."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may come from a model hub in tests
