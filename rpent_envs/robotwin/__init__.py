"""RoboTwin 2.0 bimanual tasks as `RPent/RoboTwin-v0`, run in their own Python 3.11 venv.

`env.py` is the Gymnasium env RPent users make; `backend.py` runs inside the RoboTwin venv
(rlinf-robotwin-runtime: Python < 3.12, exact pins of SAPIEN 3.0.0b1, torch 2.8, gymnasium
0.29.1, numpy 1.26); `install.py` says how that venv is built (`rpent-backend-venv robotwin`).
"""
