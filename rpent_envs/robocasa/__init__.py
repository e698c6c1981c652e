"""RoboCasa365 kitchen tasks as `RPent/RoboCasa-v0`, run in their own virtual environment.

`env.py` is the Gymnasium env RPent users make; `backend.py` runs inside the RoboCasa venv
(robocasa + praxis-robosuite + MuJoCo < 3.10, which conflict with LIBERO's robosuite 1.4 in
RPent's venv); `install.py` says how that venv is built (`rpent-backend-venv robocasa`).
"""
