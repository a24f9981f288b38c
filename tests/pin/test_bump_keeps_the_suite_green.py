"""A bump must leave ``nox -s tests`` green: in CI the GPU jobs wait on the no-GPU ones, so a test that asserts the
current pin would keep every bump PR from reaching the gates (issue 20). Here the repository is copied, its pin moved
(commit, branch, URL, date, reference, the gitlink and .gitmodules, as bump_pin writes them), and the tests that read
the repository's own files run in the copy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ci.pin import pins
from ci.pin.project import set_gitmodules_value

ROOT = Path(__file__).resolve().parents[2]
# the tests that read the repository's own files (pins.yaml, .gitmodules, the workflows, the launcher's tree)
READS_THE_REPOSITORY = ("tests/pin", "tests/serve", "tests/workflows")
OTHER_PIN = {"commit": "0123456789abcdef0123456789abcdef01234567", "branch": "another/branch", "url": "https://example.invalid/other/ROCmFPX.git",
             "reference": "ROCmFPX#99", "date": "2030-01-01"}  # fmt: skip


def test_a_bumped_copy_passes_the_tests_that_read_the_repository(tmp_path: Path) -> None:
    copy = tmp_path / "onebit-ci"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    for name in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).write_bytes(src.read_bytes())
    old = pins.load(copy / "pins.yaml")
    (copy / "pins.yaml").write_text(pins.edit_fork(old.text, OTHER_PIN))
    gitmodules = (copy / ".gitmodules").read_text()
    name = next(line.split('"')[1] for line in gitmodules.splitlines() if line.startswith("[submodule"))
    for key in ("url", "branch"):
        gitmodules = set_gitmodules_value(gitmodules, name, key, OTHER_PIN[key])
    (copy / ".gitmodules").write_text(gitmodules)
    for argv in (["init", "-q"], ["add", "-A"], ["update-index", "--add", "--cacheinfo", f"160000,{OTHER_PIN['commit']},{old.submodule}"]):
        subprocess.run(["git", *argv], cwd=copy, check=True, capture_output=True)
    assert pins.load(copy / "pins.yaml").fork.commit == OTHER_PIN["commit"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(copy)  # the copy's ci/ and serve/, not this checkout's
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *READS_THE_REPOSITORY, "-m", "not slow", "-q", "-x", "-p", "no:cacheprovider", "-k", "not bumped_copy"],
        cwd=copy, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
