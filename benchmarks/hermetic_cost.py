"""What issue 36 adds to a real main job, as a ratio of its wall time, in one run: the environment allow-list of every
program it starts, the digests of ci/ and serve/ that read every entry (and the look for strays), and the main
process's imports compiled from their sources.

    python benchmarks/hermetic_cost.py [--project PROJECT] [--profile cpu] [--against REV] [--starts 100] [--digests 10] [--rounds 5]

The main job: ``python -m ci --root PROJECT main-job --profile cpu``, run once in this process (``ci.cli.main``) on a
project with that profile's build (default: this checkout). Its wall seconds; every program it starts, counted where
every start goes through (``ci.command._Started``: ``run`` and ``run_together``; ``LlamaServer.start``: the gates'
servers), a Python apart from a native program; every digest of a tree (``digests.tree_sha256``: ci_sha256,
launcher_sha256) and every look for strays (``digests.strays``), counted by the folder it read.

Then, in the same process, before against now, alternating rounds and their medians (a busy machine slows both alike):

- a start: ``ci/command.py`` at REV (the command layer before issue 36's, loaded as a module of its own, as
  benchmarks/environment_cost.py does) against this checkout's ``run``, ``--starts`` starts of ``true`` (a native
  program) and of ``python -c pass`` a round;
- a digest: ``launcher_sha256`` of ``ci/gates/serving/launcher.py`` at REV (the files alone, by ``rglob``) against this
  checkout's ``tree_sha256`` of the same folder, ``--digests`` of each a round, for ci/ and serve/; a look for strays
  against nothing (REV has none);
- the compile: the modules the job imported, imported in a fresh Python with an empty PYTHONPYCACHEPREFIX (issue 36:
  nox's fresh folder and ``ci.cli.fresh_imports``) against one filled beforehand (the tree's __pycache__ before).

Added = the starts times their medians' difference + the digests times theirs + the looks for strays + the compile
once (one main process; the launchers' and the route gate's own bytecode folders predate REV); the ratio is the
main job's wall over its wall less that. Some digests are new in issue 36 (taken as the command starts, by
``judging_now``, the route gate's second), each adding its whole time: "at most" counts every read at its time in
the job instead of the difference.
"""

from __future__ import annotations

import argparse
import collections
import functools
import hashlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))
from common import at_least_one, run_main  # noqa: E402 -- the benchmarks' own helpers

from ci import command, digests  # noqa: E402 -- after the path set-up, so the checkout's ci/ is measured
from ci.gates.serving import launcher, llama  # noqa: E402

DEFAULT_AGAINST = "b782490"  # the commit before issue 36's command layer and digests
IMPORT_ALL = (
    "import importlib, sys\nfor name in sys.argv[1:]:\n    try:\n        importlib.import_module(name)\n    except Exception:\n        pass"
)
OWN_MODULES = ("__main__", "common", "command_before", "launcher_before")


@dataclass
class Tally:
    """What the main job started and digested."""

    starts: collections.Counter[str] = field(default_factory=collections.Counter)  # "python" or "native"
    programs: collections.Counter[str] = field(default_factory=collections.Counter)  # by program name
    reads: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)  # (what, folder)
    read_seconds: float = 0.0

    def start(self, program: str | os.PathLike[str]) -> None:
        name = Path(os.fspath(program)).name
        self.starts["python" if name.startswith("python") else "native"] += 1
        self.programs[name] += 1


def module_at(rev: str, path: str, name: str, folder: Path) -> ModuleType | None:
    """``path`` as it is at ``rev``, imported as ``name`` (its imports are this checkout's); None where it is not there."""
    done = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        if "exists on disk, but not in" in done.stderr or "does not exist in" in done.stderr:
            return None
        raise SystemExit(f"benchmark: --against {rev}: {done.stderr.strip()}")
    source = folder / Path(path).with_name(f"{name}.py")  # as deep as it was: a module finds its checkout from there
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(done.stdout)
    spec = importlib.util.spec_from_file_location(name, source)
    if spec is None or spec.loader is None:
        raise SystemExit(f"benchmark: {source}: not importable")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@contextmanager
def counted(tally: Tally) -> Iterator[None]:
    """Every start and every read of a tree counted while the block runs; the functions put back after it."""
    started_init = command._Started.__init__
    server_start = llama.LlamaServer.start
    tree_sha256 = digests.tree_sha256
    strays = digests.strays

    def init(self: Any, argv: Sequence[str | os.PathLike[str]], *args: Any, **kwargs: Any) -> None:
        tally.start(argv[0])
        started_init(self, argv, *args, **kwargs)

    def start(self: llama.LlamaServer) -> None:
        tally.start(self.launch.argv[0])
        server_start(self)

    def timed(what: str, read: Callable[[Path], Any]) -> Callable[[Path], Any]:
        def wrapped(root: Path) -> Any:
            t = time.perf_counter()
            try:
                return read(root)
            finally:
                tally.read_seconds += time.perf_counter() - t
                tally.reads[(what, Path(root).name)] += 1

        return wrapped

    patches: list[tuple[object, str, object]] = [
        (command._Started, "__init__", init),
        (llama.LlamaServer, "start", start),
        (digests, "tree_sha256", timed("digest", tree_sha256)),
        (digests, "strays", timed("strays", strays)),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, new in patches:
        setattr(owner, name, new)
    try:
        yield
    finally:
        for owner, name, old in saved:
            setattr(owner, name, old)


def main_job(project: Path, profile: str, tally: Tally) -> float:
    """Wall seconds of the main job on ``project``, run here as ``python -m ci`` runs it; a failed job ends the benchmark."""
    from ci import cli

    argv = ["--root", str(project), "main-job", "--profile", profile]
    t = time.perf_counter()
    with counted(tally):
        code = cli.main(argv)
    seconds = time.perf_counter() - t
    if code != 0:
        raise SystemExit(f"benchmark: python -m ci {' '.join(argv)} exited with {code}: its cost is not measured on a failed job")
    return seconds


def seconds_of(call: Callable[[], object], times: int) -> float:
    t = time.perf_counter()
    for _ in range(times):
        call()
    return (time.perf_counter() - t) / times


def interleaved(
    name: str, before: Callable[[], object], now: Callable[[], object], times: int, rounds: int, unit: str = "ms"
) -> tuple[float, float]:
    """Median seconds of one call before and now, ``times`` calls of each a round, the two alternating; each round and
    the medians printed."""
    scale = 1e3 if unit == "ms" else 1.0
    old: list[float] = []
    new: list[float] = []
    for r in range(1, rounds + 1):
        old.append(seconds_of(before, times))
        new.append(seconds_of(now, times))
        print(f"{name}: round {r}: before {old[-1] * scale:.2f} {unit}, now {new[-1] * scale:.2f} {unit}", flush=True)
    b, a = statistics.median(old), statistics.median(new)
    print(
        f"{name}: median of {rounds} rounds of {times}: before {b * scale:.2f} {unit}, now {a * scale:.2f} {unit}; "
        f"{(a - b) * scale:+.2f} {unit} (rounds {min(old) * scale:.2f}-{max(old) * scale:.2f} before, "
        f"{min(new) * scale:.2f}-{max(new) * scale:.2f} now)",
        flush=True,
    )
    return b, a


def tracked_py_sha256(root: Path) -> str:
    """The plainest digest of a package, the "before" where REV has no digest of its own: the tracked *.py files."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", "*.py"], cwd=root, capture_output=True, check=True).stdout
    digest = hashlib.sha256()
    for name in sorted(n for n in listed.decode().split("\0") if n):
        digest.update(name.encode() + b"\0" + hashlib.sha256((root / name).read_bytes()).digest())
    return digest.hexdigest()


def job_modules() -> list[str]:
    """The modules of this process read from a .py source and not loaded by a bare Python as it starts: what the main
    process of a job imports (and compiles, in a fresh bytecode folder)."""
    bare = subprocess.run([sys.executable, "-c", "import sys; print('\\n'.join(sys.modules))"], capture_output=True, text=True, check=True)
    loaded = set(bare.stdout.split())
    here = Path(__file__).resolve().parent
    found = []
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        origin = getattr(spec, "origin", None) if spec is not None else None
        if not origin or not origin.endswith(".py") or name in loaded or name in OWN_MODULES:
            continue
        if Path(origin).resolve().parent == here or not Path(origin).is_file():
            continue
        found.append(name)
    return found


def imports(modules: Sequence[str], prefix: str) -> None:
    """A fresh Python importing ``modules`` with its bytecode in ``prefix`` (written there, as on a CI runner)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = prefix
    subprocess.run([sys.executable, "-c", IMPORT_ALL, *modules], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def source_compile_seconds(modules: Sequence[str]) -> float:
    """Seconds to compile the sources of ``modules`` that are this checkout's (ci/, serve/): the part a fresh checkout
    compiled before issue 36 too."""
    total = 0.0
    ours = (ROOT / "ci", ROOT / "serve")  # not ROOT: nox's environments (.nox/) are under it
    for name in modules:
        spec = getattr(sys.modules.get(name), "__spec__", None)
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        if origin is None or not any(folder in origin.resolve().parents for folder in ours):
            continue
        text = origin.read_bytes()
        t = time.perf_counter()
        compile(text, str(origin), "exec", dont_inherit=True)
        total += time.perf_counter() - t
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", default=str(ROOT), help="a project with the profile's build (default: this checkout)")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument(
        "--against",
        default=DEFAULT_AGAINST,
        metavar="REV",
        help=f"the commit whose ci/command.py and launcher digest are 'before' (default {DEFAULT_AGAINST})",
    )
    ap.add_argument("--starts", type=at_least_one, default=100, help="programs started per program, way and round")
    ap.add_argument("--digests", type=at_least_one, default=10, help="digests per folder, way and round")
    ap.add_argument("--rounds", type=at_least_one, default=5)
    args = ap.parse_args()
    project = Path(args.project).resolve()
    if not (project / "pins.yaml").is_file():
        raise SystemExit(f"benchmark: --project {args.project}: no pins.yaml there; give a project with a {args.profile} build")

    with tempfile.TemporaryDirectory(prefix="onebit-bench-") as tmp:
        folder = Path(tmp)
        before_command = module_at(args.against, "ci/command.py", "command_before", folder)
        if before_command is None or hasattr(before_command, "environment"):
            raise SystemExit(
                f"benchmark: --against {args.against}: its ci/command.py is missing or already has the allow-list; give the commit before it"
            )
        before_launcher = module_at(args.against, "ci/gates/serving/launcher.py", "launcher_before", folder)
        old_digest: Callable[[Path], str] = getattr(before_launcher, "launcher_sha256", None) or tracked_py_sha256
        plain = old_digest is tracked_py_sha256

        tally = Tally()
        wall = main_job(project, args.profile, tally)
        print(f"main job: {wall:.1f} s wall (python -m ci --root {project} main-job --profile {args.profile}, in this process)", flush=True)

        # a start: as benchmarks/environment_cost.py measures it
        programs = {"native": [command.resolve("true")], "python": [sys.executable, "-c", "pass"]}
        start_cost: dict[str, float] = {}
        for kind, argv in programs.items():
            old_run, new_run = functools.partial(before_command.run, argv, quiet=True), functools.partial(command.run, argv, quiet=True)
            b, a = interleaved(f"start ({' '.join(argv)})", old_run, new_run, args.starts, args.rounds)
            start_cost[kind] = a - b

        # a digest, and a look for strays, of each folder the job read
        roots = {"ci": launcher.SOURCE_ROOT / "ci", "serve": launcher.launcher_dir()}
        digest_cost: dict[tuple[str, str], float] = {}
        for name, root in roots.items():
            b, a = interleaved(
                f"digest of {name}/",
                functools.partial(old_digest, root),
                functools.partial(digests.tree_sha256, root),
                args.digests,
                args.rounds,
            )
            digest_cost[("digest", name)] = a - b
            b, a = interleaved(f"strays of {name}/", lambda: None, functools.partial(digests.strays, root), args.digests, args.rounds)
            digest_cost[("strays", name)] = a - b

        # the compile: the job's modules from their sources, against from a filled bytecode folder
        modules = job_modules()
        warm = str(folder / "warm")
        imports(modules, warm)
        fresh = iter(range(args.rounds))
        b, a = interleaved(
            f"imports of the job's {len(modules)} modules",
            lambda: imports(modules, warm),
            lambda: imports(modules, str(folder / f"cold-{next(fresh)}")),
            1,
            args.rounds,
            unit="s",
        )
        compile_cost = a - b
        ours = source_compile_seconds(modules)

    n_starts = sum(tally.starts.values())
    starts_added = sum(n * start_cost[kind] for kind, n in tally.starts.items())
    reads_added = 0.0
    for (what, name), n in tally.reads.items():
        reads_added += n * digest_cost.get((what, name), digest_cost[(what, "serve")])  # a copy of serve/ (ship's), by its name
    added = starts_added + reads_added + compile_cost
    by_program = ", ".join(f"{p} {n}" for p, n in tally.programs.most_common())
    print()
    print(f"main job wall: {wall:.1f} s")
    print(f"programs started: {n_starts} ({', '.join(f'{k} {n}' for k, n in sorted(tally.starts.items()))}: {by_program})")
    print(
        f"per start added: {start_cost['python'] * 1e3:+.2f} ms a python, {start_cost['native'] * 1e3:+.2f} ms a native program; {starts_added:.2f} s in all"
    )
    reads = ", ".join(
        f"{what} of {name}/ {n} x {digest_cost.get((what, name), digest_cost[(what, 'serve')]) * 1e3:+.1f} ms"
        for (what, name), n in sorted(tally.reads.items())
    )
    before_is = "a sha256 of the tracked *.py files alone" if plain else f"launcher_sha256 at {args.against} (the files alone)"
    print(
        f"digests and looks for strays: {sum(tally.reads.values())} ({reads}; before: {before_is}, none); {reads_added:.2f} s added, {tally.read_seconds:.2f} s all told in the job"
    )
    print(
        f"compile from source, once: {compile_cost:+.2f} s ({len(modules)} modules; {ours:.2f} s of it ci/ and serve/, which a fresh checkout compiled before too)"
    )
    print(f"total added: {added:.2f} s = {starts_added:.2f} starts + {reads_added:.2f} digests + {compile_cost:.2f} compile")
    print(f"ratio: {wall:.1f} / ({wall:.1f} - {added:.2f}) = {wall / (wall - added):.3f}x")
    # some of the reads are new in issue 36 (the start digest, judging_now's, the route gate's second, the strays):
    # each of those adds its whole time, not the difference; at most, every read the job made
    most = starts_added + tally.read_seconds + compile_cost
    print(f"at most, every digest and look new: {most:.2f} s; ratio {wall / (wall - most):.3f}x")


if __name__ == "__main__":
    run_main(main)
