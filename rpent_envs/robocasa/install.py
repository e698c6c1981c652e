"""The RoboCasa backend's virtual environment and where its assets live (no simulator import)."""

from rpent_envs.subprocess_env.venv import VenvSpec

PYTHON_VARIABLE = "RPENT_ROBOCASA_PYTHON"  # interpreter of the RoboCasa venv (optional)
ASSETS_VARIABLE = "ROBOCASA_ASSETS_PATH"  # robocasa's own setting for an external asset root

# robocasa 1.0.1 passes robosuite's `load_model_on_init`, which stock robosuite 1.5.2 lacks;
# praxis-robosuite 1.5.2.post1 (same `robosuite` package) has it. robocasa declares
# `robosuite>=1.5.2` by distribution name, so it goes in with --no-deps after its other
# dependencies, or pip would add stock robosuite over praxis-robosuite.
VENV_SPEC = VenvSpec(
    name="robocasa",
    python_version="3.12",
    install_steps=(
        (
            "praxis-robosuite==1.5.2.post1",
            "mujoco>=3.3,<3.10",
            "numpy>=1.24,<3",
            "scipy>=1.15",
            "gymnasium>=1.0,<2",
            "h5py",
            "imageio",
            "lxml",
            "opencv-python",
            "Pillow",
            "pyyaml",
            "termcolor",
            "tqdm",
        ),
        ("--no-deps", "rlinf-robocasa365==1.0.1"),
    ),
    smoke_test=(
        "import importlib.metadata as m; m.version('praxis-robosuite'); "
        "import robocasa.wrappers.gym_wrapper"
    ),
)
