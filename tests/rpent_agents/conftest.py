"""The agent tests' shared helpers: pytest puts this folder on `sys.path` (it holds a conftest),
so the tests of every subfolder import `agent_helpers` by name."""
