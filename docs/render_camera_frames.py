"""Render the camera frames shown in the docs into docs/images/ (run by hand, on the CPU).

    python docs/render_camera_frames.py [--image-size 256] [--only peg libero franka]

- peg: `RPent/PegInsertionSideWideClearance-v1`, seed 0, after 40 steps of the scripted
  expert (peg grasped, on its way to the hole): the side camera and the wrist camera
  (SAPIEN; lavapipe on a machine without a GPU).
- libero: `RPent/Libero-v0`, libero_goal task 8, seed 0, after the settle steps: agentview and
  eye-in-hand (MuJoCo offscreen; `MUJOCO_GL=osmesa` on a machine without EGL).
- franka: the MuJoCo FR3 that franky-sim simulates (the real env's images come from
  RealSense cameras, so there is no env camera to render without one).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import gymnasium as gym
import numpy as np

from recorders.image_writer import write_png

IMAGES_DIR = Path(__file__).resolve().parent / "images"
PEG_EXPERT_STEPS = 40
logger = logging.getLogger(__name__)


def render_peg(image_size: int) -> dict[str, np.ndarray]:
    """Side and wrist camera of the peg env mid-carry."""
    import rpent_envs  # noqa: F401
    from rpent_envs.maniskill.expert import PegInsertionExpert

    env = gym.make("RPent/PegInsertionSideWideClearance-v1", image_size=image_size)
    expert = PegInsertionExpert(env)
    obs, _ = env.reset(seed=0)
    for _ in range(PEG_EXPERT_STEPS):
        obs, *_ = env.step(expert.act())
    env.close()
    return {"peg_side_camera": obs["image"], "peg_wrist_camera": obs["wrist_image"]}


def render_libero(image_size: int) -> dict[str, np.ndarray]:
    """Agentview and eye-in-hand camera of a LIBERO task after the reset."""
    import rpent_envs  # noqa: F401

    env = gym.make("RPent/Libero-v0", suite="libero_goal", task_id=8, image_size=image_size)
    obs, _ = env.reset(seed=0)
    env.close()
    return {"libero_agentview": obs["image"], "libero_wrist_camera": obs["wrist_image"]}


def render_franka_sim(image_size: int) -> dict[str, np.ndarray]:
    """The scene franky-sim simulates (MuJoCo FR3 in its initial pose), from a free camera."""
    import xml.etree.ElementTree as ElementTree

    import mujoco
    from franky_sim.constants import DEFAULT_INITIAL_JOINT_POS
    from franky_sim.mujoco_simulator import MujocoSimulator

    simulator = MujocoSimulator()
    simulator.add_robot()
    scene_xml = ElementTree.tostring(simulator.scene, encoding="unicode")
    model = mujoco.MjModel.from_xml_string(scene_xml)
    data = mujoco.MjData(model)
    data.qpos[: len(DEFAULT_INITIAL_JOINT_POS)] = DEFAULT_INITIAL_JOINT_POS  # the arm comes first
    mujoco.mj_forward(model, data)
    camera = mujoco.MjvCamera()
    camera.lookat[:] = (0.3, 0.0, 0.4)
    camera.distance, camera.azimuth, camera.elevation = 1.8, 140.0, -18.0
    with mujoco.Renderer(model, image_size, image_size) as renderer:
        renderer.update_scene(data, camera)
        return {"franka_sim_fr3": renderer.render().copy()}


RENDERERS = {"peg": render_peg, "libero": render_libero, "franka": render_franka_sim}


def main() -> None:
    """Render the chosen families and write one PNG per camera."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=256)
    parser.add_argument("--only", nargs="+", choices=sorted(RENDERERS), default=sorted(RENDERERS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    IMAGES_DIR.mkdir(exist_ok=True)
    for family in args.only:
        for name, image in RENDERERS[family](args.image_size).items():
            path = IMAGES_DIR / f"{name}.png"
            write_png(path, image, compression=9)
            logger.info("wrote %s", path)


if __name__ == "__main__":
    main()
