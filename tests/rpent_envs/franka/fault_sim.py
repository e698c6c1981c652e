"""franky-sim's MuJoCo FR3 server with a fault switch, run as its own process by the tests.

    python fault_sim.py 127.0.0.N

Prints `ready <hostname>` once the robot accepts connections. SIGUSR1 aborts the motion in
progress the way a real arm's reflex does: the move command is answered `kReflexAborted` and the
robot leaves Move mode, so libfranka raises a ControlException in the client. franky-sim enforces
no limits itself, so this is the only way to make it produce a reflex. SIGTERM stops the server.
"""

import signal
import sys

from franky_sim import SimulationServer
from franky_sim.franka_robot_protocol import BaseCommand, MoveStatus, RobotCommand
from franky_sim.mujoco_simulator import MujocoSimulator


class FaultSwitch:
    """Flags set from signal handlers, acted upon between two 1 ms simulation ticks."""

    def __init__(self) -> None:
        self.reflex_requested = False
        self.running = True

    def request_reflex(self, *_) -> None:
        self.reflex_requested = True

    def stop(self, *_) -> None:
        self.running = False


def abort_motion_by_reflex(robot_server) -> bool:
    motion_id = robot_server.current_motion_id
    if not motion_id:
        return False
    BaseCommand.send_response(
        robot_server._tcp_socket, RobotCommand.kMove, motion_id, MoveStatus.kReflexAborted
    )
    robot_server.stop_motion(send_preemption_signal=False)
    robot_server.reset_current_motion_id()
    return True


def main(hostname: str) -> None:
    switch = FaultSwitch()
    signal.signal(signal.SIGUSR1, switch.request_reflex)
    signal.signal(signal.SIGTERM, switch.stop)
    with MujocoSimulator() as sim:
        sim.add_robot()
        with SimulationServer(sim, hostname_candidates=[hostname]) as server:
            print(f"ready {hostname}", flush=True)
            while switch.running:
                if switch.reflex_requested:
                    switch.reflex_requested = not abort_motion_by_reflex(server.robot_servers[0])
                server.run_once()


if __name__ == "__main__":
    main(sys.argv[1])
