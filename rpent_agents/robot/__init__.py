"""Stage 2 on a real arm: `rpent-stage2-robot`, one robot with a human in the loop.

The command: `train` (`rpent-stage2-robot`: `main`, `train`, `RobotResults`), `config`
(`RobotTrainArgs`, `OperatorConfig`, the presets), `control_loop` (`ControlLoop`: one env, a
local actor, the learner never waited for), `local_policy` (`LocalPolicy`: the local actor
and, with Q-ranked acting, critic; chunks picked as `rpent-stage2` picks them), `robot_env`
(the env with the operator's console, the recorder and the control clock), `control_period`
(`ControlPeriods`) and `status` (the status line).

The learner side: `learner_service` (`LearnerService`: the Stage 2 learner of a run, its
replay, saves and weights), `learner_host` (its update and heartbeat threads),
`learner_link` (`LearnerLink`, what the control loop calls without waiting, and
`ProcessLearnerLink`, the learner in a child process) and `ray_learner_link`
(`RayLearnerLink`, the learner as a Ray actor on another machine, and `robot_node_actor`);
`run_state` holds the run's counters (`RobotRunState`).

The public names load lazily (module `__getattr__`), as `rpent_agents`' do.

Example:
    >>> from rpent_agents.robot import RobotRunState
    >>> RobotRunState().episodes
    0
"""

from __future__ import annotations

from rpent_agents.common.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "ControlLoop": "rpent_agents.robot.control_loop",
    "EpisodeReport": "rpent_agents.robot.control_loop",
    "LearnerLostError": "rpent_agents.robot.control_loop",
    "LoopPlan": "rpent_agents.robot.control_loop",
    "ControlPeriods": "rpent_agents.robot.control_period",
    "OperatorConfig": "rpent_agents.robot.config",
    "RobotTrainArgs": "rpent_agents.robot.config",
    "StatusLine": "rpent_agents.robot.status",
    "RobotResults": "rpent_agents.robot.train",
    "ActingSpec": "rpent_agents.robot.learner_service",
    "ActorWeights": "rpent_agents.robot.learner_service",
    "LearnerService": "rpent_agents.robot.learner_service",
    "LearnerSetup": "rpent_agents.robot.learner_service",
    "LearnerStatus": "rpent_agents.robot.learner_service",
    "LocalPolicy": "rpent_agents.robot.local_policy",
    "LearnerLinkOptions": "rpent_agents.robot.learner_host",
    "LearnerReady": "rpent_agents.robot.learner_host",
    "LearnerLink": "rpent_agents.robot.learner_link",
    "LearnerLinkError": "rpent_agents.robot.learner_link",
    "ProcessLearnerLink": "rpent_agents.robot.learner_link",
    "RayLearnerLink": "rpent_agents.robot.ray_learner_link",
    "robot_node_actor": "rpent_agents.robot.ray_learner_link",
    "RobotRunState": "rpent_agents.robot.run_state",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
