"""Where tools/rocm_root.py may put a Debian root (issue 36): never into this machine's own system, directly, through a
link or through ``..``, and ``make`` only into a new or empty directory or a root it made. ``make /usr`` had planned
debootstrap and a chroot into the host's own /usr.

Nothing here runs a step: a refused ROOT stops before the plan, and ``execute`` is replaced by a recorder wherever a
mistake in the check would otherwise reach it (these tests run as root on some machines)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.rocm_root import load

rocm_root = load()


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, object]]:
    """What reached ``execute`` (nothing must), recorded instead of run."""
    calls: list[tuple[Path, object]] = []
    monkeypatch.setattr(rocm_root, "execute", lambda root, steps: calls.append((root, steps)))
    return calls


def _system(root: str, inside: str = "") -> str:
    relation = rocm_root.IS_INSIDE.format(system=inside) if inside else rocm_root.IS
    return str(rocm_root.SYSTEM_DIRECTORY.format(root=root, relation=relation))


def _shared(root: str) -> str:
    return str(rocm_root.SHARED_PLACE.format(root=root, place=root, example=f"{root}/rocm-root"))


SYSTEM = ["/usr", "/etc", "/var", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/proc", "/sys", "/dev", "/run"]


@pytest.mark.parametrize("command", ["make", "run"])
@pytest.mark.parametrize("given", SYSTEM)
def test_a_system_directory_is_refused_in_one_line_and_nothing_runs(
    command: str, given: str, ran: list[tuple[Path, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    resolved = str(Path(given).resolve())  # /bin is /usr/bin where /usr is merged
    args = [command, given] + (["build"] if command == "run" else [])
    assert rocm_root.main(args) == 2
    shown = given if resolved == given else rocm_root.RESOLVES_TO.format(given=given, path=resolved)
    top = "/" + Path(resolved).parts[1]
    expected = _system(shown) if resolved == top else _system(shown, inside=top)
    assert capsys.readouterr() == ("", rocm_root.ERROR.format(message=expected) + "\n")
    assert ran == []


@pytest.mark.parametrize("given", ["/usr/local/rocm-root", "/etc/rocm-root", "/var/lib/rocm-root", "/lib/x"])
def test_a_directory_inside_a_system_directory_is_refused_on_a_dry_run_too(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    resolved = Path(given).resolve()
    shown = given if str(resolved) == given else rocm_root.RESOLVES_TO.format(given=given, path=resolved)
    assert rocm_root.main(["make", given, "--dry-run"]) == 2
    assert capsys.readouterr() == ("", rocm_root.ERROR.format(message=_system(shown, inside="/" + resolved.parts[1])) + "\n")


@pytest.mark.parametrize("given", ["/home", "/opt", "/srv", "/var/lib/machines", "/var/tmp"])
def test_a_shared_directory_itself_is_refused_and_a_folder_of_its_own_inside_is_not(
    given: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert rocm_root.main(["make", given, "--dry-run"]) == 2
    assert capsys.readouterr() == ("", rocm_root.ERROR.format(message=_shared(given)) + "\n")
    inside = Path(given) / f"rocm-root-test-{os.getpid()}"  # not made: a dry run only reads
    assert rocm_root.root_problem(str(inside), inside, tmp_path / "project") is None


@pytest.mark.parametrize("target", ["/usr", "/etc", "/var"])
def test_a_link_to_a_system_directory_is_refused_naming_where_it_goes(
    target: str, tmp_path: Path, ran: list[tuple[Path, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "root"
    link.symlink_to(target)
    assert rocm_root.main(["make", str(link)]) == 2
    shown = rocm_root.RESOLVES_TO.format(given=link, path=target)
    assert capsys.readouterr() == ("", rocm_root.ERROR.format(message=_system(shown)) + "\n")
    assert ran == []


def test_a_link_inside_the_root_to_a_system_directory_is_refused(tmp_path: Path, ran: list[tuple[Path, object]]) -> None:
    (tmp_path / "roots").symlink_to("/usr/local")
    assert rocm_root.main(["make", str(tmp_path / "roots" / "sid")]) == 2
    assert ran == []


def test_dot_dots_that_climb_into_a_system_directory_are_refused(
    tmp_path: Path, ran: list[tuple[Path, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    given = str(tmp_path) + "/.." * len(tmp_path.parts) + "/etc"
    assert rocm_root.main(["make", given, "--mirror", "http://x.invalid/debian"]) == 2
    shown = rocm_root.RESOLVES_TO.format(given=given, path="/etc")
    assert capsys.readouterr() == ("", rocm_root.ERROR.format(message=_system(shown)) + "\n")
    assert ran == []


def test_make_refuses_a_directory_of_someones_files_and_writes_nothing(
    tmp_path: Path, ran: list[tuple[Path, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    assert rocm_root.main(["make", str(tmp_path)]) == 2
    message = rocm_root.NOT_EMPTY.format(root=tmp_path, marker=rocm_root.MARKER)
    assert capsys.readouterr() == ("", rocm_root.ERROR.format(message=message) + "\n")
    assert ran == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_make_refuses_a_file(tmp_path: Path, ran: list[tuple[Path, object]], capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "root").write_text("")
    assert rocm_root.main(["make", str(tmp_path / "root"), "--dry-run"]) == 2
    assert capsys.readouterr().err == rocm_root.ERROR.format(message=rocm_root.NOT_A_DIRECTORY.format(root=tmp_path / "root")) + "\n"


@pytest.mark.parametrize("state", ["new", "empty", "marked", "made before the marker"])
def test_make_takes_a_new_or_empty_directory_or_a_root_it_made(state: str, tmp_path: Path, ran: list[tuple[Path, object]]) -> None:
    root = tmp_path / "root"
    if state != "new":
        root.mkdir()
    if state == "marked":
        (root / rocm_root.MARKER).write_text(rocm_root.MARKER_TEXT)
        (root / "etc").mkdir()  # a debootstrap that stopped half way
    if state == "made before the marker":
        for path in rocm_root.MADE_BEFORE_MARKER:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text("")
    assert rocm_root.main(["make", str(root)]) == 0
    assert [r for r, _ in ran] == [root]


def test_make_marks_the_root_before_anything_goes_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "debian_version").write_text("forky/sid\n")  # debootstrap is skipped: nothing runs
    rocm_root.execute(root, rocm_root.make_plan(root, tmp_path)[:1])
    assert (root / rocm_root.MARKER).read_text() == rocm_root.MARKER_TEXT
    assert rocm_root.made_here(root)


def test_a_root_through_a_link_loop_is_one_line(tmp_path: Path, ran: list[tuple[Path, object]], capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    given = str(tmp_path / "a" / "root")
    assert rocm_root.main(["make", given]) == 2
    err = capsys.readouterr().err
    assert err.startswith(rocm_root.ERROR.format(message=rocm_root.UNRESOLVABLE.format(root=given, problem=""))), err
    assert err.count("\n") == 1
    assert ran == []
