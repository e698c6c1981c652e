"""The RoboTwin backend's virtual environment (no simulator import).

Two ways to build it, both into the venv folder `robotwin`:

- `robotwin` (users): rlinf-robotwin-runtime 0.1.3 with all its exact pins, torch 2.8.0 from
  PyPI included (a CUDA build: ~9 GB installed, ~25 min to create on the 2-core CI machine).
- `robotwin-light` (CI): the same packages and pins except torch, which is the CPU build
  2.13.0 that the CI machines keep on local disk (pip's find-links), and warp-lang, which
  nothing imports up to the asset boundary. Everything RoboTwin imports to build an env is
  the real thing; only torch's version differs from the runtime's pin.
"""

from rpent_envs.subprocess_env.venv import VenvSpec

PYTHON_VARIABLE = "RPENT_ROBOTWIN_PYTHON"  # interpreter of the RoboTwin venv (optional)
ASSETS_VARIABLE = "ROBOTWIN_ASSETS_ROOT"  # the runtime's own setting for its asset snapshot

RUNTIME = "rlinf-robotwin-runtime==0.1.3"
# The runtime's declared requirements (Linux x86_64) without torch and warp-lang; setuptools
# moves up to what torch 2.13 needs (80.x still has the pkg_resources the pin kept).
RUNTIME_DEPENDENCIES_WITHOUT_TORCH = (
    "gymnasium==0.29.1",
    "huggingface-hub>=0.27.1",
    "imageio>=2.38.0,<3",
    "matplotlib",
    "mplib==0.2.1",
    "numpy==1.26.4",
    "opencv-python==4.9.0.80",
    "open3d==0.18.0",
    "pillow>=10",
    "pyyaml",
    "sapien==3.0.0b1",
    "scipy==1.10.1",
    "setuptools>=77.0.3,<81",  # the runtime pins <75.9; torch 2.13 needs >=77.0.3
    "toppra==0.6.3",
    "transforms3d==0.4.2",
    "trimesh==4.4.3",
    "yourdfpy>=0.0.53",
)
SMOKE_TEST = "import robotwin.envs._base_task, robotwin.assets, gymnasium, sapien, mplib"

VENV_SPEC = VenvSpec(
    name="robotwin",
    python_version="3.11",
    install_steps=((RUNTIME,),),
    smoke_test=SMOKE_TEST,
)
LIGHT_VENV_SPEC = VenvSpec(
    name="robotwin",
    python_version="3.11",
    install_steps=(
        ("torch==2.13.0", *RUNTIME_DEPENDENCIES_WITHOUT_TORCH),
        ("--no-deps", RUNTIME),
    ),
    smoke_test=SMOKE_TEST,
)
