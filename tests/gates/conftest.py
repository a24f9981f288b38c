from tests.build.conftest import build_fork, build_project, make_build_project  # noqa: F401  (the build stage's fixtures, shared)
