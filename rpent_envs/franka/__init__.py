"""Real Franka arm (FR3 / Panda) through franky: backend protocol, safety box and the env.

Nothing here imports franky at package import time; the franky backend loads it on first use.
"""
