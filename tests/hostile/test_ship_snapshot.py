"""Ship stages once, from a snapshot (issue 36, item 3). Ship checked serve/ and then copied it: an edit in between
(the window widened by a slow GITHUB_STEP_SUMMARY write) went into the wheel. An edited url or branch in pins.yaml
went into release.json unverified. And the outputs were written through whatever stood at their names: a link
planted at the wheel's predictable name in dist/ made ship overwrite a file elsewhere.

Now ship verifies the pin, copies serve/ into a private folder, hashes the copy, holds that digest against the
gates' records, builds the wheel from the copy and writes each output under a fresh name in dist/ (a link itself
refused), renamed into place."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from ci import cli, command
from ci.commands import ship as ship_command
from ci.gates.serving import launcher as launcher_files
from ci.pin import verify
from ci.release import records
from ci.release import ship as release_ship
from ci.release import wheel as release_wheel
from tests.release.test_ship import GATES, built, record, ship
from tests.support.messages import said
from tests.support.project import FORK_URL, Project

EDIT = "\nDEVICE_CHOICES = ()  # edited while ship ran\n"


def launcher_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    launcher = tmp_path / "serve"
    shutil.copytree(launcher_files.launcher_dir(), launcher, ignore=shutil.ignore_patterns(*launcher_files.LAUNCHER_SKIPS))
    monkeypatch.setattr(launcher_files, "launcher_dir", lambda: launcher)
    return launcher


def wheel_text(project: Project, name: str) -> str:
    with zipfile.ZipFile(next((project.root / "dist").glob("onebit_serve-*.whl"))) as zf:
        return zf.read(name).decode()


def test_an_edit_to_the_launcher_between_the_check_and_the_copy_is_not_shipped(build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = launcher_copy(tmp_path, monkeypatch)
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    judged = launcher_files.launcher_sha256()
    summary = records.step_summary

    def slow_summary(markdown: str) -> None:  # the job summary's write: the launcher is edited meanwhile
        summary(markdown)
        with (launcher / "route.py").open("a") as f:
            f.write(EDIT)

    monkeypatch.setattr(records, "step_summary", slow_summary)
    r = ship(build_project)
    assert r.code == 4, r.out + r.err
    why = release_wheel.NOT_JUDGED.format(copy=launcher_files.launcher_sha256()[:12], judged=judged[:12])
    assert r.err == cli.ERROR.format(message=release_wheel.LAUNCHER_COPY_DIFFERS.format(launcher=launcher, why=why)) + "\n"
    assert not (build_project.root / "dist").exists()


def test_an_edit_to_the_launcher_after_the_copy_is_not_in_the_wheel(build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = launcher_copy(tmp_path, monkeypatch)
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    committed = (launcher / "route.py").read_text()
    def edited_while_built(*args: Any, **kwargs: Any) -> Any:
        with (launcher / "route.py").open("a") as f:
            f.write(EDIT)
        return command.run(*args, **kwargs)

    monkeypatch.setattr("ci.release.wheel.run", edited_while_built)  # python -m build, from the copy
    r = ship(build_project)
    assert r.code == 0, r.out + r.err
    assert wheel_text(build_project, "serve/route.py") == committed


@pytest.mark.parametrize(("key", "value"), [("url", "https://example.invalid/someone-else/ROCmFPX.git"), ("branch", "elsewhere")])
def test_an_edited_pin_url_or_branch_is_refused_before_anything_is_written(build_project: Project, key: str, value: str) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    pinned = {"url": FORK_URL, "branch": "main"}[key]
    build_project.pins.write_text(build_project.pins.read_text().replace(f"{key}: {pinned}\n", f"{key}: {value}\n", 1))
    r = ship(build_project)
    assert r.code == 4, r.out + r.err
    disagrees = verify.URL_DISAGREES if key == "url" else verify.BRANCH_DISAGREES
    assert said(ship_command.PIN_UNVERIFIED, r.err), r.err
    assert said(disagrees, r.err, **{key: pinned}, pinned=value), r.err
    assert not (build_project.root / "dist").exists()


def wheel_name(m: dict[str, Any]) -> str:
    version = release_wheel.release_version(metadata.version("onebit-ci"), m["pin"]["commit"], m["key"])
    return f"onebit_serve-{version}-py3-none-any.whl"


def test_a_link_at_the_wheel_s_name_in_dist_writes_nothing_elsewhere(build_project: Project, tmp_path: Path) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    victim = tmp_path / "victim"
    victim.write_text("not the wheel\n")
    dist = build_project.root / "dist"
    dist.mkdir()
    (dist / wheel_name(m)).symlink_to(victim)
    r = ship(build_project)
    assert victim.read_text() == "not the wheel\n"
    assert r.code == 0, r.out + r.err
    assert not (dist / wheel_name(m)).is_symlink()
    assert zipfile.is_zipfile(dist / wheel_name(m))
    assert sorted(p.name for p in dist.iterdir() if p.name.startswith(".")) == []  # no temporary name left


def test_a_dist_that_is_a_link_is_refused(build_project: Project, tmp_path: Path) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (build_project.root / "dist").symlink_to(elsewhere, target_is_directory=True)
    r = ship(build_project)
    assert r.code == 4, r.out + r.err
    assert r.err == cli.ERROR.format(message=release_ship.DIST_IS_A_LINK.format(dist="dist")) + "\n"
    assert list(elsewhere.iterdir()) == []


def test_release_json_names_the_libraries_and_what_each_binary_loads(make_build_project: Callable[..., Project]) -> None:
    """1bit serve --require-gated runs llama-server with exactly the libraries release.json names (serve/gated.py)."""
    project = make_build_project()
    m = built(project)
    record(project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    r = ship(project)
    assert r.code == 0, r.out + r.err
    release = json.loads(next((project.root / "dist").glob("onebit_serve-*.release.json")).read_text())
    assert release["build"]["libraries"] == {k: v["sha256"] for k, v in m.get("libraries", {}).items()}
    assert release["build"]["loads"] == {k: list(v) for k, v in m.get("loads", {}).items()}
    assert json.loads(wheel_text(project, "serve/release.json")) == release


def test_a_record_appended_while_ship_decides_lands_after_the_release(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ship read the ledger, then wrote the step summary (a FIFO there blocks for as long as its reader likes), then
    built and published: a FAILED record appended meanwhile landed before the release, and the wheel shipped on a
    ledger that no longer said every gate passed. Ship now holds the ledger's lock from its read to its own record:
    an append waits, and lands after the release it could not have stopped."""
    import threading

    from ci.gates.results import Status
    from ci.release import ledger

    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    summary = records.step_summary
    failing = threading.Thread(target=record, args=(build_project, m, GATES.backend_ops_failed))

    def slow_summary(markdown: str) -> None:  # while ship decides, a gate run ends FAILED
        summary(markdown)
        failing.start()
        failing.join(timeout=1.0)  # it may land now only if ship holds no lock

    monkeypatch.setattr(records, "step_summary", slow_summary)
    r = ship(build_project)
    failing.join()
    assert r.code == 0, r.out + r.err
    book = ledger.read(build_project.root / "build" / "results" / "ledger.jsonl")
    assert [(rec.gate, rec.verdict) for rec in book.records[-2:]] == [("ship", Status.PASSED.value), ("backend_ops", Status.FAILED.value)]


def stage_of(args: Any) -> Path:
    """The stage ``python -m build`` builds from: its argv's last word."""
    return Path(args[0][-1])


def test_an_edit_to_ships_own_copy_after_its_check_is_not_shipped(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process of the same user (an orphan that cleared its environment, left running by a gate) waited for the
    stage's pyproject.toml and appended to its serve/route.py before python -m build read it: the wheel shipped a
    launcher no gate judged (a hostile pass, 2026-12-05). Ship now holds what it built against what it copied and
    checked, file by file, and publishes the bytes it checked."""
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)

    def copy_edited_before_the_build(*args: Any, **kwargs: Any) -> Any:
        with (stage_of(args) / "serve" / "route.py").open("a") as f:
            f.write(EDIT)
        return command.run(*args, **kwargs)

    monkeypatch.setattr("ci.release.wheel.run", copy_edited_before_the_build)
    r = ship(build_project)
    assert r.code == 4, r.out + r.err
    assert said(release_wheel.BUILT_DIFFERS, r.err.removeprefix("onebit-ci: error: ").strip(), what="wheel", member="serve/route.py", why=release_wheel.MEMBER_NOT_JUDGED)
    assert not (build_project.root / "dist").exists()


def test_a_wheel_swapped_in_the_stage_after_the_build_is_not_shipped(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)

    def wheel_rewritten(*args: Any, **kwargs: Any) -> Any:
        done = command.run(*args, **kwargs)
        wheel = next((stage_of(args) / "dist").glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            members = {i.filename: zf.read(i) for i in zf.infolist()}
        members["serve/route.py"] += EDIT.encode()
        with zipfile.ZipFile(wheel, "w") as zf:
            for name, data in members.items():
                zf.writestr(name, data)
        return done

    monkeypatch.setattr("ci.release.wheel.run", wheel_rewritten)
    r = ship(build_project)
    assert r.code == 4, r.out + r.err
    assert not (build_project.root / "dist").exists()


def test_the_ship_record_binds_the_wheel_and_the_sdist(build_project: Project) -> None:
    """A wheel swapped in dist/ after ship, before the job uploads it, could not be told from the one ship wrote: the
    ship record now carries the sha256 of each output it published."""
    import hashlib

    from ci.release import ledger

    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    r = ship(build_project)
    assert r.code == 0, r.out + r.err
    shipped = ledger.read(build_project.root / "build" / "results" / "ledger.jsonl").records[-1]
    props = shipped.data["properties"]
    dist = build_project.root / "dist"
    wheel, sdist = next(dist.glob("*.whl")), next(dist.glob("*.tar.gz"))
    assert props["wheel_sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert props["sdist_sha256"] == hashlib.sha256(sdist.read_bytes()).hexdigest()


def _rewrite_wheel(wheel: Path, change: Callable[[str, dict[str, bytes]], None]) -> None:
    with zipfile.ZipFile(wheel) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist()}
    info = next(n.split("/")[0] for n in members if ".dist-info/" in n)
    change(info, members)
    wheel.unlink()
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _rewrite_sdist(sdist: Path, change: Callable[[str, Path], None]) -> None:
    import tarfile

    unpacked = sdist.with_suffix(".unpacked")
    with tarfile.open(sdist) as tf:
        tf.extractall(unpacked, filter="fully_trusted")
    top = next(unpacked.iterdir())
    change(top.name, top)
    sdist.unlink()
    with tarfile.open(sdist, "w:gz") as tf:
        for path in sorted(top.rglob("*")):
            tf.add(path, arcname=f"{top.name}/{path.relative_to(top)}", recursive=False)
        if change is _sdist_dotdot:
            data = b"import os; os.system('echo planted')\n"
            import io

            info = tarfile.TarInfo(f"{top.name}/onebit_serve.egg-info/../setup.py")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    shutil.rmtree(unpacked)


def _wheel_pth(info: str, m: dict[str, bytes]) -> None:
    m[f"{info}/../evil_hook.pth"] = b"import os; os.system('echo planted')\n"


def _wheel_dependency(info: str, m: dict[str, bytes]) -> None:
    m[f"{info}/METADATA"] += b"Requires-Dist: evil-dependency\n"


def _wheel_record(info: str, m: dict[str, bytes]) -> None:
    m[f"{info}/top_level.txt"] = b"serve\nevil\n"


def _sdist_dotdot(top: str, root: Path) -> None:
    pass  # the member is added with its '..' name by _rewrite_sdist


def _sdist_pkg_info_link(top: str, root: Path) -> None:
    (root / "PKG-INFO").unlink()
    (root / "PKG-INFO").symlink_to("/etc/passwd")


def _sdist_setup_cfg(top: str, root: Path) -> None:
    with (root / "setup.cfg").open("a") as f:
        f.write("[options]\ninstall_requires = evil-dependency\n")


@pytest.mark.parametrize(
    ("kind", "change"),
    [("whl", _wheel_pth), ("whl", _wheel_dependency), ("whl", _wheel_record), ("tar.gz", _sdist_dotdot), ("tar.gz", _sdist_pkg_info_link), ("tar.gz", _sdist_setup_cfg)],
    ids=["wheel-pth-through-dist-info", "wheel-added-dependency", "wheel-top-level-edited", "sdist-setup-py-through-egg-info", "sdist-pkg-info-link", "sdist-setup-cfg-edited"],
)
def test_a_wheel_or_sdist_edited_outside_serve_after_the_build_is_not_shipped(
    build_project: Project, monkeypatch: pytest.MonkeyPatch, kind: str, change: Callable[..., None]
) -> None:
    """Ship checked the members under serve/ and let any .dist-info or .egg-info member through: a wheel swapped after
    the build with '<dist-info>/../evil_hook.pth' (a .pth at the top of site-packages runs at every Python start) or an
    added Requires-Dist shipped, signed (a second hostile pass). Every member is now on an allow-list, by name and
    content, and a name with '..' or a member that is not a regular file is refused."""
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)

    def tampered(*args: Any, **kwargs: Any) -> Any:
        done = command.run(*args, **kwargs)
        out = next((stage_of(args) / "dist").glob(f"*.{kind}"))
        (_rewrite_wheel if kind == "whl" else _rewrite_sdist)(out, change)
        return done

    monkeypatch.setattr("ci.release.wheel.run", tampered)
    r = ship(build_project)
    assert r.code == 4, r.out + r.err
    assert "is not what ship copied and checked" in r.err, r.err
    assert not (build_project.root / "dist").exists()


def _extra_file(dist: Path) -> None:
    (dist / "evil.pth").write_bytes(b"import os\n")


def _link_to_environ(dist: Path) -> None:
    (dist / "notes.txt").symlink_to("/proc/self/environ")


def _renamed_wheel(dist: Path) -> None:
    wheel = next(dist.glob("*.whl"))
    wheel.rename(dist / "evil_pkg-6.6.6-cp311-cp311-win_amd64.whl")


def _wheel_link(dist: Path) -> None:
    wheel = next(dist.glob("*.whl"))
    real = dist.parent / "elsewhere.whl"
    wheel.rename(real)
    wheel.symlink_to(real)


def _prepended_archive(dist: Path) -> None:
    wheel = next(dist.glob("*.whl"))
    import io

    extra = io.BytesIO()
    with zipfile.ZipFile(extra, "w") as zf:
        zf.writestr("evil_hook.pth", "import os\n")
    wheel.write_bytes(extra.getvalue() + wheel.read_bytes())


def _appended_tar(dist: Path) -> None:
    import gzip
    import io
    import tarfile

    sdist = next(dist.glob("*.tar.gz"))
    raw = gzip.decompress(sdist.read_bytes())
    extra = io.BytesIO()
    with tarfile.open(fileobj=extra, mode="w") as tf:
        data = b"import os\n"
        info = tarfile.TarInfo(sdist.name.removesuffix(".tar.gz") + "/setup.py")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    sdist.write_bytes(gzip.compress(raw + extra.getvalue()))


def _second_name_header(dist: Path) -> None:
    def change(info: str, m: dict[str, bytes]) -> None:
        import base64
        import hashlib

        m[f"{info}/METADATA"] += b"Name: evil-serve\n"
        body = m[f"{info}/METADATA"]
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        rows = [r for r in m[f"{info}/RECORD"].decode().splitlines() if not r.startswith(f"{info}/METADATA,")]
        m[f"{info}/RECORD"] = "\n".join([f"{info}/METADATA,sha256={digest},{len(body)}", *rows, ""]).encode()

    _rewrite_wheel(next(dist.glob("*.whl")), change)


def _record_extra_column(dist: Path) -> None:
    def change(info: str, m: dict[str, bytes]) -> None:
        m[f"{info}/RECORD"] = m[f"{info}/RECORD"].replace(b",,", b",,,", 1)

    _rewrite_wheel(next(dist.glob("*.whl")), change)


@pytest.mark.parametrize(
    "change",
    [_extra_file, _link_to_environ, _renamed_wheel, _wheel_link, _prepended_archive, _appended_tar, _second_name_header, _record_extra_column],
    ids=["extra-file", "link-to-environ", "renamed-wheel", "wheel-a-link", "archive-before-the-wheel", "tar-after-the-sdist", "second-name-header", "record-extra-column"],
)
def test_what_the_stage_holds_beside_the_checked_members_is_not_shipped(build_project: Project, monkeypatch: pytest.MonkeyPatch, change: Callable[[Path], None]) -> None:
    """A third hostile pass: ship published every file of the stage's dist/ (an extra evil.pth; a link to
    /proc/self/environ, which wrote ship's own environment, the ledger's key in it, into dist/), a wheel under any name,
    the bytes around the archive its check read (an archive before the wheel, a tar after the sdist's end), a METADATA
    with a second Name, and ended in an internal error on a RECORD row of four columns. Now dist/ must hold exactly the
    wheel and the sdist of this version, regular files; each is written again from the members checked; every header
    is there once; a malformed archive is a refusal."""
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)

    def tampered(*args: Any, **kwargs: Any) -> Any:
        done = command.run(*args, **kwargs)
        change(stage_of(args) / "dist")
        return done

    monkeypatch.setattr("ci.release.wheel.run", tampered)
    monkeypatch.setenv("ONEBIT_TEST_SECRET", "sekrit")
    r = ship(build_project)
    dist = build_project.root / "dist"
    import gzip

    published = b"".join(gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes() for p in dist.iterdir()) if dist.exists() else b""
    for planted in (b"sekrit", b"evil", b"setup.py"):
        assert planted not in published, r.out + r.err
    if change in (_prepended_archive, _appended_tar):  # written again from the members checked: shipped, clean
        assert r.code == 0, r.out + r.err
    else:
        assert r.code == 4, r.out + r.err
        assert "python -m build wrote" in r.err, r.err
        assert not dist.exists()
