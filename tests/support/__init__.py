"""What the tests share: real git repositories, the fixture fork and project, real binaries, recorded outputs,
and the pytest fixtures registered for every test (fixtures.py)."""
