"""tools/rocm_root.py's plans: what ``make`` and ``run`` would execute, computed without running anything (the real
root it made, and the builds in it, are in docs/build.md)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.messages import pattern
from tests.support.rocm_root import SCRIPT, load

rocm_root = load()
ROOT = Path("/srv/sid")
CHROOT = ("chroot", "/srv/sid", "/usr/bin/env", "-C", "/", "DEBIAN_FRONTEND=noninteractive", "HOME=/root")


def test_make_plan_bootstraps_sid_installs_debians_rocm_and_copies_project_and_fork() -> None:
    steps = rocm_root.make_plan(ROOT, Path("/home/me/onebit-ci"), fork_git=Path("/home/me/ROCmFPX.git"))
    by_name = {s.name: s for s in steps}
    assert [s.name for s in steps] == [
        "debootstrap",
        "apt update",
        "apt install",
        "git safe.directory",
        "project clone",
        "project fetch",
        "project checkout",
        "fork clone",
        "fork fetch",
        "venv",
        "nox",
    ]
    assert by_name["debootstrap"].argv == (
        "debootstrap",
        "--variant=minbase",
        "--include=ca-certificates",
        "sid",
        "/srv/sid",
        "http://deb.debian.org/debian",
    )
    assert by_name["debootstrap"].skip_when == "etc/debian_version"
    # the archive may be a snapshot whose Release file has expired
    assert by_name["apt update"].argv == (*CHROOT, "apt-get", "-o", "Acquire::Check-Valid-Until=false", "update")
    install = by_name["apt install"].argv
    assert install[: len(CHROOT) + 6] == (
        *CHROOT,
        "apt-get",
        "-o",
        "Acquire::Check-Valid-Until=false",
        "install",
        "-y",
        "--no-install-recommends",
    )
    assert {"hipcc", "libamdhip64-dev", "libhipblas-dev", "librocblas-dev", "ccache", "ninja-build", "python3-venv"} <= set(install)
    assert by_name["git safe.directory"].argv[-2:] == ("safe.directory", "*")
    assert by_name["project checkout"].argv == ("git", "-C", "/srv/sid/src/onebit-ci", "checkout", "--quiet", "--detach", "FETCH_HEAD")
    assert by_name["fork clone"].argv == ("git", "clone", "--quiet", "--mirror", "/home/me/ROCmFPX.git", "/srv/sid/src/fork.git")
    assert by_name["nox"].argv == (*CHROOT, "/opt/onebit-nox/bin/pip", "install", "--quiet", "nox")


def test_make_plan_without_a_fork_copies_none_and_takes_another_mirror() -> None:
    steps = rocm_root.make_plan(ROOT, Path("/p"), mirror="http://archive.example/debian")
    assert not [s for s in steps if s.name.startswith("fork")]
    assert steps[0].argv[-1] == "http://archive.example/debian"


def test_run_plan_runs_the_session_with_its_arguments_in_the_projects_copy() -> None:
    (step,) = rocm_root.run_plan(ROOT, "build", ["--profile", "gfx1151", "-j", "2"])
    assert step.argv == (
        "chroot",
        "/srv/sid",
        "/usr/bin/env",
        "-C",
        "/src/onebit-ci",
        "DEBIAN_FRONTEND=noninteractive",
        "HOME=/root",
        "/opt/onebit-nox/bin/nox",
        "-s",
        "build",
        "--",
        "--profile",
        "gfx1151",
        "-j",
        "2",
    )


def test_a_skipped_step_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "debian_version").write_text("forky/sid\n")
    rocm_root.execute(tmp_path, rocm_root.make_plan(tmp_path, tmp_path)[:1])
    assert capsys.readouterr().out == rocm_root.SKIPPED.format(step="debootstrap", path="etc/debian_version") + "\n"


def test_dry_run_prints_the_plan_and_session_arguments_after_the_double_dash() -> None:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "run", "/srv/sid", "gpu_tests", "--dry-run", "--", "--profile", "gfx1151"],
        capture_output=True,
        text=True,
        check=True,
    )
    command = (
        "chroot /srv/sid /usr/bin/env -C /src/onebit-ci DEBIAN_FRONTEND=noninteractive HOME=/root "
        "/opt/onebit-nox/bin/nox -s gpu_tests -- --profile gfx1151"
    )
    assert r.stdout == rocm_root.STEP_LINE.format(name=rocm_root.SESSION_STEP.format(session="gpu_tests"), command=command) + "\n"


def test_sigterm_during_a_run_ends_it_as_ctrl_c_does_and_unbinds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cancelled job's SIGTERM left /proc and /dev bound in the root (seen here): it now unwinds through ``bound``."""
    import os
    import signal

    (tmp_path / "src" / "onebit-ci").mkdir(parents=True)
    events: list[str] = []

    @contextlib.contextmanager
    def bound(root: Path) -> Iterator[None]:  # the mounts, recorded instead of made (they need root and a real root)
        events.append("bind")
        try:
            yield
        finally:
            events.append("unbind")

    def execute(root: Path, steps: object) -> None:
        with rocm_root.bound(root):
            os.kill(os.getpid(), signal.SIGTERM)  # the CI runner cancels the job
            events.append("not reached")

    monkeypatch.setattr(rocm_root, "bound", bound)
    monkeypatch.setattr(rocm_root, "execute", execute)
    monkeypatch.setattr(rocm_root.os, "geteuid", lambda: 0)
    assert rocm_root.main(["run", str(tmp_path), "build"]) == 128 + signal.SIGTERM
    assert events == ["bind", "unbind"]
    assert capsys.readouterr().err == rocm_root.INTERRUPTED_BY.format(signal="SIGTERM") + "\n"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout


def test_refreshing_the_copy_keeps_a_change_made_inside_and_names_one_the_new_head_also_changes(tmp_path: Path) -> None:
    """A bump_pin run inside the root changes pins.yaml; a later ``make`` whose HEAD changes pins.yaml too was git's
    "would be overwritten" and a run on the old copy. Now: one line naming the file and both ways out, the change kept."""
    project, root = tmp_path / "project", tmp_path / "root"
    project.mkdir()
    _git(project, "init", "-q", "-b", "main")
    _git(project, "config", "user.email", "t@example.invalid")
    _git(project, "config", "user.name", "t")
    (project / "pins.yaml").write_text("commit: a\n")
    (project / "README.md").write_text("one\n")
    _git(project, "add", ".")
    _git(project, "commit", "-qm", "one")
    refresh = [s for s in rocm_root.make_plan(root, project) if s.name.startswith("project ")]
    rocm_root.execute(root, refresh)
    copy = root / "src" / "onebit-ci"
    (copy / "pins.yaml").write_text("commit: bumped inside\n")
    _git(copy, "add", "pins.yaml")  # bump_pin stages what it changes
    (project / "README.md").write_text("two\n")  # a new HEAD that leaves pins.yaml alone: the change inside stays
    _git(project, "commit", "-qam", "two")
    rocm_root.execute(root, refresh)
    assert ((copy / "README.md").read_text(), (copy / "pins.yaml").read_text()) == ("two\n", "commit: bumped inside\n")
    (project / "pins.yaml").write_text("commit: b\n")
    _git(project, "commit", "-qam", "three")
    with pytest.raises(rocm_root.ConfigError) as caught:
        rocm_root.execute(root, refresh)
    assert caught.value.message == rocm_root.CHANGED_BOTH_WAYS.format(copy=copy, files="pins.yaml", paths="pins.yaml")
    assert ((copy / "README.md").read_text(), (copy / "pins.yaml").read_text()) == ("two\n", "commit: bumped inside\n")
    _git(copy, "checkout", "HEAD", "--", "pins.yaml")  # the way out it names works
    rocm_root.execute(root, refresh)
    assert (copy / "pins.yaml").read_text() == "commit: b\n"


def test_a_python_without_the_projects_dependencies_gets_one_line(tmp_path: Path) -> None:
    """tools/rocm_root.py run by a bare python3 (no psutil): one line naming what is missing and which Python to use."""
    r = subprocess.run([sys.executable, "-I", "-S", str(SCRIPT), "--help"], capture_output=True, text=True, check=False)
    assert (r.returncode, r.stderr.count("\n")) == (1, 1)
    assert pattern(rocm_root.ERROR.format(message=rocm_root.LACKS)).match(r.stderr), r.stderr


def test_a_fork_git_that_is_no_repository_is_named_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A mirror's parent folder given for --fork-git was git's four lines after apt had run; now one line, first."""
    if rocm_root.os.geteuid() != 0:
        pytest.skip("make checks its arguments after the root check; this machine's tests run as root")
    assert rocm_root.main(["make", str(tmp_path / "root"), "--fork-git", str(tmp_path)]) == 2
    assert capsys.readouterr().err == rocm_root.ERROR.format(message=rocm_root.NOT_A_FORK_CLONE.format(path=tmp_path)) + "\n"
    assert not (tmp_path / "root").exists()


PROJECT = SCRIPT.parents[1]


@pytest.mark.parametrize(
    ("command", "given", "message"),
    [
        (["make"], "", rocm_root.EMPTY_ROOT),  # an unset $ROOT: debootstrap would have filled the working directory
        (["make"], "/", rocm_root.HOST_ROOT.format(root="/")),  # apt-get and git config --global on the host itself
        (["run"], "/", rocm_root.HOST_ROOT.format(root="/")),
        (["make"], str(PROJECT), rocm_root.HOLDS_PROJECT.format(root=PROJECT, relation="is", project=PROJECT)),
        (["make"], str(PROJECT.parent), rocm_root.HOLDS_PROJECT.format(root=PROJECT.parent, relation="holds", project=PROJECT)),
        (["make"], str(PROJECT / "build" / "r"), rocm_root.HOLDS_PROJECT.format(root=PROJECT / "build" / "r", relation="is inside", project=PROJECT)),
    ],
)
def test_a_root_that_is_not_a_directory_of_its_own_is_refused_even_on_a_dry_run(
    command: list[str], given: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*command, given] + (["build"] if command == ["run"] else ["--dry-run"])
    assert rocm_root.main(args) == 2
    assert capsys.readouterr() == ("", rocm_root.ERROR.format(message=message) + "\n")


def test_make_refuses_arguments_after_the_double_dash(capsys: pytest.CaptureFixture[str]) -> None:
    assert rocm_root.main(["make", "/srv/sid", "--dry-run", "--", "--mirror", "x"]) == 2
    assert capsys.readouterr().err == rocm_root.ERROR.format(message=rocm_root.NOTHING_AFTER_DASHES.format(args="--mirror x")) + "\n"


@pytest.mark.parametrize("status", [1, 3, 130])
def test_a_failed_session_exits_with_the_sessions_own_status(
    status: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run`` exited 6 (a failed step's code) for every failed session; now as ``nox -s SESSION`` itself exits."""
    (tmp_path / "src" / "onebit-ci").mkdir(parents=True)
    session = rocm_root.Step("nox -s build", (sys.executable, "-c", f"raise SystemExit({status})"))  # a real process, no chroot
    monkeypatch.setattr(rocm_root, "run_plan", lambda root, name, args: [session])
    monkeypatch.setattr(rocm_root.os, "geteuid", lambda: 0)
    assert rocm_root.main(["run", str(tmp_path), "build"]) == status
    exited = rocm_root.CommandFailed([sys.executable], status, "", what="nox -s build").message
    assert capsys.readouterr().err == rocm_root.ERROR.format(message=exited) + "\n"


def test_a_session_killed_by_a_signal_exits_as_a_shell_says_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "src" / "onebit-ci").mkdir(parents=True)
    session = rocm_root.Step("nox -s build", (sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    monkeypatch.setattr(rocm_root, "run_plan", lambda root, name, args: [session])
    monkeypatch.setattr(rocm_root.os, "geteuid", lambda: 0)
    assert rocm_root.main(["run", str(tmp_path), "build"]) == 128 + 9


def _documented_steps() -> list[list[str]]:
    """The command lines of docs/build.md's steps into a root, each split as a shell would, comments dropped."""
    import shlex

    text = (PROJECT / "docs" / "build.md").read_text()
    section = text[text.index("## gfx1151 in a Debian unstable root") :]
    section = section[: section.index("\nMeasured here")]
    blocks = section.split("```")[1::2]
    return [shlex.split(line, comments=True) for block in blocks for line in block.strip().splitlines() if line.strip()]


def test_the_documented_steps_install_debootstrap_name_git_and_compile_once_at_the_jobs_asked() -> None:
    """docs/build.md's steps on a fresh Debian machine: debootstrap installed before make; bump_pin with --no-compile,
    so the one compile is the build's with its -j (the bump had compiled at ninja's default, and build -j 2 after it
    did nothing); git given a name and an address in the root before a commit there. Each line parses."""
    from ci import cli
    from ci.parser import parser

    steps = _documented_steps()
    sessions: list[tuple[str, list[str]]] = []
    for i, argv in enumerate(steps):
        if "tools/rocm_root.py" in argv:
            args = rocm_root.parse(argv[argv.index("tools/rocm_root.py") + 1 :])
            if args.command == "make":
                assert any(s[:3] == ["apt-get", "install", "-y"] and "debootstrap" in s for s in steps[:i]), steps[:i]
            else:
                name = args.session.replace("_", "-")
                parser({n: lambda a: 0 for n in cli.COMMANDS}).parse_args([name, *args.args])
                sessions.append((name, args.args))
        if argv[-4:-1] == ["git", "commit", "-F"]:
            configured = [s[-2] for s in steps[:i] if s[-4:-2] == ["config", "--global"]]
            assert {"user.name", "user.email"} <= set(configured), steps[:i]
    names = [name for name, _ in sessions]
    assert names.index("bump-pin") < names.index("build")
    assert "--no-compile" in dict(sessions)["bump-pin"]
    assert "-j" in dict(sessions)["build"]


def test_a_commit_made_inside_the_root_is_not_left_behind_by_a_refresh(tmp_path: Path) -> None:
    """docs/build.md has a bump committed inside the root; a later ``make`` checked out the project's new HEAD over
    it, and the copy went on without the bump (the commit only in the reflog). Now one line naming it and both ways
    out; a HEAD the project has (a branch switched on this machine) is still followed."""
    project, root = tmp_path / "project", tmp_path / "root"
    project.mkdir()
    _git(project, "init", "-q", "-b", "main")
    for key, value in (("user.email", "t@example.invalid"), ("user.name", "t")):
        _git(project, "config", key, value)
    (project / "pins.yaml").write_text("commit: a\n")
    _git(project, "add", ".")
    _git(project, "commit", "-qm", "one")
    refresh = [s for s in rocm_root.make_plan(root, project) if s.name.startswith("project ")]
    rocm_root.execute(root, refresh)
    copy = root / "src" / "onebit-ci"
    _git(project, "switch", "-qc", "other")
    (project / "README.md").write_text("other\n")
    _git(project, "add", ".")
    _git(project, "commit", "-qm", "other")
    rocm_root.execute(root, refresh)  # the copy follows the project's HEAD to another branch
    _git(project, "switch", "-q", "main")
    rocm_root.execute(root, refresh)  # and back: no longer an ancestor, but the project has it
    assert not (copy / "README.md").exists()
    for key, value in (("user.email", "t@example.invalid"), ("user.name", "t")):
        _git(copy, "config", key, value)
    (copy / "pins.yaml").write_text("commit: bumped inside\n")
    _git(copy, "commit", "-qam", "bump inside the root")
    inside = _git(copy, "rev-parse", "HEAD").strip()
    (project / "README.md").write_text("two\n")
    _git(project, "add", ".")
    _git(project, "commit", "-qm", "two")
    with pytest.raises(rocm_root.ConfigError) as caught:
        rocm_root.execute(root, refresh)
    assert caught.value.message == rocm_root.COMMITTED_INSIDE.format(copy=copy, commit=inside[:12], project=project)
    assert _git(copy, "rev-parse", "HEAD").strip() == inside
    _git(copy, "checkout", "-q", "--detach", "FETCH_HEAD")  # one way out it names: drop it
    rocm_root.execute(root, refresh)
    assert (copy / "README.md").read_text() == "two\n"
