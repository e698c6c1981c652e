"""Privileged geometry of a LIBERO scene: poses, extents and contacts read from the MuJoCo state.

The scripted expert decides from these every step; nothing here is part of an observation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

TABLE_TOP_Z_M = 0.9  # LIBERO's table surface (table offset 0.9 m)


@dataclass(frozen=True)
class Extent:
    """World-frame extent of an object's collision meshes.

    Attributes:
        low: Smallest x, y, z of its vertices (m).
        high: Largest x, y, z of its vertices (m).
    """

    low: np.ndarray
    high: np.ndarray

    @property
    def center_xy(self) -> np.ndarray:
        """Centre of the footprint (m)."""
        return (self.low[:2] + self.high[:2]) / 2


class SceneView:
    """Read-only view of one LIBERO task's simulator (the robosuite env inside LIBERO's wrapper).

    Example:
        >>> scene = SceneView(env.unwrapped.libero_env.env)
        >>> scene.eef_pos(), scene.extent("akita_black_bowl_1").high[2]
    """

    def __init__(self, robosuite_env: Any) -> None:
        """Attach to a LIBERO robosuite env (single Panda arm).

        Args:
            robosuite_env: `LiberoEnv.libero_env.env`.
        """
        import mujoco

        self._mujoco = mujoco
        self.env = robosuite_env
        self.robot = robosuite_env.robots[0]
        self._model = robosuite_env.sim.model._model
        self._data = robosuite_env.sim.data._data
        self._geom_ids: dict[str, list[int]] = {}

    def eef_pos(self) -> np.ndarray:
        """Position of the grip site between the fingertips (m)."""
        return np.array(self._data.site_xpos[self.robot.eef_site_id])

    def eef_rotation(self) -> np.ndarray:
        """Orientation (3x3) of the grip site: x is the fingers' closing axis, z points out."""
        return np.array(self._data.site_xmat[self.robot.eef_site_id]).reshape(3, 3)

    def finger_opening_m(self) -> float:
        """Distance between the two fingers (m), about 0.08 fully open."""
        qpos = self._data.qpos[self.robot._ref_gripper_joint_pos_indexes]
        return float(qpos[0] - qpos[1])

    def body_pos(self, name: str) -> np.ndarray:
        """Origin of an object's or fixture's body (what LIBERO's predicates compare)."""
        return np.array(self._data.xpos[self.env.obj_body_id[name]])

    def body_rotation(self, name: str) -> np.ndarray:
        """Orientation (3x3) of an object's or fixture's body."""
        return np.array(self._data.xmat[self.env.obj_body_id[name]]).reshape(3, 3)

    def body_names(self) -> list[str]:
        """Every object and fixture of the task (not the table, not region sites)."""
        return [*self.env.objects_dict, *self.env.fixtures_dict]

    def site_pos(self, name: str) -> np.ndarray:
        """Position of a region site (m)."""
        return np.array(self.env.sim.data.get_site_xpos(name))

    def is_site(self, name: str) -> bool:
        """Whether `name` is a region site (e.g. a stove's cook region) rather than a body."""
        return name in self.env.object_sites_dict

    def site_parent(self, name: str) -> str:
        """The object or fixture a region site belongs to."""
        return self.env.object_states_dict[name].parent_name

    def extent(self, name: str) -> Extent:
        """World-frame extent of an object's collision meshes (boxes for primitive geoms)."""
        points = [self._geom_points(geom_id) for geom_id in self._geoms_of(name)]
        stacked = np.concatenate(points)
        return Extent(low=stacked.min(axis=0), high=stacked.max(axis=0))

    def local_footprint(self, name: str) -> np.ndarray:
        """Size (m) of an object's footprint along its body x and y axes."""
        rotation, origin = self.body_rotation(name), self.body_pos(name)
        points = np.concatenate([self._geom_points(g) for g in self._geoms_of(name)])
        local = (points - origin) @ rotation
        return local[:, :2].max(axis=0) - local[:, :2].min(axis=0)

    def is_grasped(self, name: str) -> bool:
        """Both finger pads touch the object."""
        return bool(self.env._check_grasp(self.robot.gripper, self.env.get_object(name)))

    def touches_other_than_gripper(self, name: str) -> bool:
        """The object touches something besides the gripper (a support, the target)."""
        gripper_geoms = set(self.robot.gripper.contact_geoms)
        return bool(self.env.get_contacts(self.env.get_object(name)) - gripper_geoms)

    def touches(self, name: str, other: str) -> bool:
        """The two objects' collision geoms touch."""
        return bool(self.env.check_contact(self.env.get_object(name), self.env.get_object(other)))

    def _geoms_of(self, name: str) -> list[int]:
        if name not in self._geom_ids:
            geom_names = self.env.get_object(name).contact_geoms
            ids = [
                self._mujoco.mj_name2id(self._model, self._mujoco.mjtObj.mjOBJ_GEOM, geom)
                for geom in geom_names
            ]
            self._geom_ids[name] = [geom_id for geom_id in ids if geom_id >= 0]
        return self._geom_ids[name]

    def _geom_points(self, geom_id: int) -> np.ndarray:
        """World positions of a geom's mesh vertices, or of its bounding-box corners."""
        model, data = self._model, self._data
        rotation = data.geom_xmat[geom_id].reshape(3, 3)
        if model.geom_type[geom_id] == self._mujoco.mjtGeom.mjGEOM_MESH:
            mesh_id = model.geom_dataid[geom_id]
            start = model.mesh_vertadr[mesh_id]
            local = model.mesh_vert[start : start + model.mesh_vertnum[mesh_id]]
        else:
            center, half = model.geom_aabb[geom_id, :3], model.geom_aabb[geom_id, 3:]
            signs = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T
            local = center + signs * half
        return local @ rotation.T + data.geom_xpos[geom_id]
