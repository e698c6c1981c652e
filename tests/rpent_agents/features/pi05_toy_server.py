"""`rpent-feature-server` serving the toy pi0.5 (`pi05_toy.py`), for test_pi05.py.

The toy's small Gemma and vision configs are swapped in while the checkpoint loads, and the
C++ kernels build without vector ISA (~35% faster on the test machines); the rest of the
command line goes to the server as a user would type it.

    python pi05_toy_server.py TOY_ROOT [rpent-feature-server arguments]
"""

import sys
from pathlib import Path

import pytest
from pi05_toy import inject_tiny_configs
from torch._inductor import config as inductor_config

from rpent_agents.features import server


def main() -> None:
    toy_root = Path(sys.argv[1])
    checkpoint = ["--pi05-checkpoint", str(toy_root / "checkpoint")]
    tokenizer = ["--tokenizer-dir", str(toy_root / "tokenizer")]
    sys.argv = [sys.argv[0], *checkpoint, *tokenizer, *sys.argv[2:]]
    inductor_config.cpp.vec_isa_ok = False
    with pytest.MonkeyPatch.context() as monkeypatch:
        inject_tiny_configs(monkeypatch)
        server.main()


if __name__ == "__main__":
    main()
