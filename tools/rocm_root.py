"""A Debian unstable root with Debian's ROCm, and nox sessions run inside it: gfx1151 compiled on a machine whose
own distribution has no ROCm >= 6.1 (docs/build.md, "gfx1151 in a Debian unstable root").

    python tools/rocm_root.py make ROOT [--mirror URL] [--fork-git DIR] [--dry-run]
    python tools/rocm_root.py run ROOT SESSION [--dry-run] [-- SESSION-ARGS...]

``make`` creates ROOT with debootstrap (skipped when ROOT already holds a Debian system), installs the packages with
apt-get, copies this project's committed HEAD to /src/onebit-ci inside it (a fetch and checkout when it is already
there: its build/ stays, and so does a change made inside, a bump_pin's, unless the new HEAD changes that file), a clone of a local fork (``--fork-git``) to /src/fork.git, and nox in a venv at
/opt/onebit-nox. ``run`` runs ``nox -s SESSION -- ARGS`` in /src/onebit-ci inside the root and exits with its status
(nox's: 1 for a failed session). Both need root (chroot, mount); /proc and /dev are bound for the time of the command
and unbound after, on failure too. ``--dry-run`` prints the plan, one command a line, and runs nothing.

ROOT is refused, before anything runs, when it is or resolves (a link, ``..``) into this machine's own system
(/usr, /etc, /var, /bin, /sbin, /lib*, /boot, /proc, /sys, /dev, /run, and what is in them), or is / or a directory
whose top holds others' things (/home, /opt, /srv, /mnt, /media, /tmp, /root, /var/lib/machines, /var/tmp: a folder
of its own inside them is fine). ``make`` takes a new or empty directory, or a root it made: it writes
``.onebit-rocm-root`` into ROOT before debootstrap, and a root made before that file existed is known by its Debian
system and the project's copy.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Messages, shared with the tests that match on them (tests/support/messages.py)
ERROR = "rocm_root: error: {message}"
LACKS = "this Python lacks {module}: run it with one that has the project's dependencies (e.g. .nox/onebit/bin/python)"
NOT_A_FORK_CLONE = "--fork-git {path}: not a git repository; name a clone of the fork (a bare mirror or a checkout)"
CHANGED_BOTH_WAYS = (
    "{copy}: changed inside the root and by the new HEAD: {files}; keep the change with git -C {copy} stash, "
    "or drop it with git -C {copy} checkout HEAD -- {paths}, then make again"
)
COMMITTED_INSIDE = (
    "{copy}: HEAD {commit} was committed inside the root and {project} does not have it: the refresh would leave it "
    "behind; take it to the project (git -C {copy} format-patch -o DIR FETCH_HEAD..HEAD, then git am DIR/*.patch in "
    "{project}), or drop it with git -C {copy} checkout --detach FETCH_HEAD, then make again"
)
STEP_LINE = "{name}: {command}"  # a step of --dry-run's plan
SKIPPED_WHEN = "  (skipped when {path} exists)"
SESSION_STEP = "nox -s {session}"
SKIPPED = "rocm_root: {step}: skipped ({path} exists)"
INTERRUPTED_BY = "rocm_root: interrupted by {signal}"
INTERRUPTED = "rocm_root: interrupted"  # Ctrl-C
# a ROOT that would put the Debian root, its chroot and its binds somewhere they must never go (an unset $ROOT is "")
EMPTY_ROOT = "ROOT is empty; name a directory of its own for the Debian root (e.g. /srv/rocm-root)"
HOST_ROOT = "ROOT {root} is this machine's own /; name a directory of its own for the Debian root"
HOLDS_PROJECT = "ROOT {root} {relation} the project checkout {project}; name a directory outside it"
SYSTEM_DIRECTORY = (
    "ROOT {root} {relation} a system directory of this machine; name a directory of its own for the Debian root (e.g. /srv/rocm-root)"
)
IS = "is"  # SYSTEM_DIRECTORY's relations
IS_INSIDE = "is inside {system},"
SHARED_PLACE = "ROOT {root} is {place}, whose top holds others' things; name a folder of its own inside it (e.g. {example})"
RESOLVES_TO = "{given} (resolves to {path})"  # a ROOT through a link or ..: both, so the user sees where it went
NOT_EMPTY = (
    "ROOT {root} holds files and is no root this tool made (it has no {marker}); name a new or empty directory for the "
    "Debian root, or one that tools/rocm_root.py make made"
)
NOT_A_DIRECTORY = "ROOT {root} is not a directory; name a new or empty directory for the Debian root"
UNRESOLVABLE = "ROOT {root} cannot be resolved: {problem}"  # a link loop
NOTHING_AFTER_DASHES = "make takes no arguments after --: {args}"

try:
    from ci.command import run  # the project's one way to run a program, from a checkout
    from ci.errors import CommandFailed, ConfigError, OnebitError
    from ci.files import write_atomic
    from ci.processes import Terminated, signals_as_interrupt
except ImportError as exc:  # a Python without the project's dependencies: one line, not a traceback
    sys.exit(ERROR.format(message=LACKS.format(module=exc.name)))

SUITE = "sid"
MIRROR = "http://deb.debian.org/debian"
# the archive a machine reaches may be a snapshot whose Release file has expired
APT = ("apt-get", "-o", "Acquire::Check-Valid-Until=false")
PACKAGES = (
    "hipcc",
    "libamdhip64-dev",
    "libhipblas-dev",
    "librocblas-dev",
    "cmake",
    "ninja-build",
    "g++",
    "git",
    "python3-venv",
    "python3-pip",
    "ccache",
)
PROJECT_IN_ROOT = "/src/onebit-ci"
FORK_IN_ROOT = "/src/fork.git"
VENV_IN_ROOT = "/opt/onebit-nox"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # pip inside the root trusts what this machine trusts
BINDS = ("proc", "dev")
# What make writes into ROOT first, before debootstrap: how a later make knows the directory for a root it made (a
# Debian system alone does not say it: this machine's own / has etc/debian_version too)
MARKER = ".onebit-rocm-root"
MARKER_TEXT = "a Debian root made by onebit-ci's tools/rocm_root.py make; nox sessions run in it (docs/build.md)\n"
MADE_BEFORE_MARKER = ("etc/debian_version", PROJECT_IN_ROOT.lstrip("/") + "/.git")  # a root made before MARKER existed
# This machine's own system, where debootstrap, apt-get, chroot and the binds of /proc and /dev must never go: the
# programs, libraries, configuration, kernel and live state (lib* is /lib, /lib32, /lib64, /libx32 and
# /lib.usr-is-merged), the directory and everything in it
SYSTEM_TREES = ("bin", "boot", "dev", "etc", "lib*", "proc", "run", "sbin", "sys", "usr", "var")
# ... but under /var, where an OS tree may live: systemd-nspawn keeps them in /var/lib/machines, /var/tmp is scratch
# that survives a reboot
OWN_PLACES_IN_SYSTEM = ("/var/lib/machines", "/var/tmp")
# Directories that hold others' things at their top (every user's home, the host's /opt/rocm, a site's data, mounts,
# temporary files): the directory itself is refused, a folder of its own inside it is a fine ROOT (/srv/rocm-root)
SHARED_PLACES = ("/home", "/opt", "/srv", "/mnt", "/media", "/tmp", "/root")


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    skip_when: str = ""  # a path under the root whose existence makes the step unnecessary

    def line(self) -> str:
        skipped = SKIPPED_WHEN.format(path=self.skip_when) if self.skip_when else ""
        return STEP_LINE.format(name=self.name, command=shlex.join(self.argv)) + skipped


def in_root(root: Path, *argv: str, cwd: str = "/") -> tuple[str, ...]:
    return ("chroot", str(root), "/usr/bin/env", "-C", cwd, "DEBIAN_FRONTEND=noninteractive", "HOME=/root", *argv)


def make_plan(
    root: Path, project: Path, mirror: str = MIRROR, fork_git: Path | None = None, packages: Sequence[str] = PACKAGES
) -> list[Step]:
    """What ``make`` runs, in order; pure."""
    dest = root / PROJECT_IN_ROOT.lstrip("/")
    steps = [
        Step(
            "debootstrap",
            ("debootstrap", "--variant=minbase", "--include=ca-certificates", SUITE, str(root), mirror),
            skip_when="etc/debian_version",
        ),
        Step("apt update", in_root(root, *APT, "update")),
        Step("apt install", in_root(root, *APT, "install", "-y", "--no-install-recommends", *packages)),
        Step("git safe.directory", in_root(root, "git", "config", "--global", "--replace-all", "safe.directory", "*")),
        Step(
            "project clone",
            ("git", "clone", "--quiet", "--no-checkout", str(project), str(dest)),
            skip_when=PROJECT_IN_ROOT.lstrip("/") + "/.git",
        ),
        Step("project fetch", ("git", "-C", str(dest), "fetch", "--quiet", str(project), "HEAD")),
        Step("project checkout", ("git", "-C", str(dest), "checkout", "--quiet", "--detach", "FETCH_HEAD")),
    ]
    if fork_git is not None:
        fork_dest = root / FORK_IN_ROOT.lstrip("/")
        steps += [
            Step(
                "fork clone",
                ("git", "clone", "--quiet", "--mirror", str(fork_git), str(fork_dest)),
                skip_when=FORK_IN_ROOT.lstrip("/") + "/HEAD",
            ),
            Step("fork fetch", ("git", "-C", str(fork_dest), "fetch", "--quiet", "--prune", str(fork_git), "+refs/*:refs/*")),
        ]
    steps += [
        Step("venv", in_root(root, "python3", "-m", "venv", VENV_IN_ROOT), skip_when=VENV_IN_ROOT.lstrip("/") + "/bin/python"),
        Step("nox", in_root(root, f"{VENV_IN_ROOT}/bin/pip", "install", "--quiet", "nox")),
    ]
    return steps


def run_plan(root: Path, session: str, args: Sequence[str]) -> list[Step]:
    """What ``run`` runs: nox in the project's copy inside the root; pure."""
    nox = in_root(root, f"{VENV_IN_ROOT}/bin/nox", "-s", session, "--", *args, cwd=PROJECT_IN_ROOT)
    return [Step(SESSION_STEP.format(session=session), nox)]


@contextlib.contextmanager
def bound(root: Path) -> Iterator[None]:
    """/proc and /dev of this machine inside the root, for the time of the block; unbound after, whatever happens."""
    mounted: list[Path] = []
    try:
        for name in BINDS:
            target = root / name
            if not os.path.ismount(target):
                run(["mount", "--bind", f"/{name}", str(target)], quiet=True)
                mounted.append(target)
        yield
    finally:
        for target in reversed(mounted):
            run(["umount", "--lazy", str(target)], check=False, quiet=True)


def changes_in_the_way(dest: Path) -> list[str]:
    """Files changed inside the root's copy (a bump_pin run there) that the incoming HEAD changes too: git would refuse
    the checkout, and a forced one would lose them. The fork's checkout is left out: its alternates name /src/fork.git,
    a path only inside the root."""
    local = run(["git", "-C", str(dest), "diff", "--ignore-submodules", "--name-only", "HEAD"], quiet=True).output.splitlines()
    incoming = run(
        ["git", "-C", str(dest), "diff", "--ignore-submodules", "--name-only", "HEAD", "FETCH_HEAD"], quiet=True
    ).output.splitlines()
    return sorted(set(local) & set(incoming))


def committed_inside(dest: Path) -> str | None:
    """COMMITTED_INSIDE when the copy's HEAD was committed inside the root (a bump committed there, docs/build.md):
    the project it was cloned from does not have it, and checking out the project's HEAD would leave it behind. A
    HEAD the project has is followed wherever the project's HEAD went (another branch, a rewind)."""
    head = run(["git", "-C", str(dest), "rev-parse", "HEAD"], quiet=True).output.strip()
    project = run(["git", "-C", str(dest), "config", "remote.origin.url"], quiet=True).output.strip()
    if run(["git", "-C", project, "cat-file", "-e", f"{head}^{{commit}}"], check=False, quiet=True).returncode == 0:
        return None
    return COMMITTED_INSIDE.format(copy=dest, commit=head[:12], project=project)


def _show(line: str) -> None:
    print(line.rstrip("\n"), flush=True)


def execute(root: Path, steps: Sequence[Step]) -> None:
    for step in steps:
        if step.name == "debootstrap":  # ROOT says it is this tool's before anything goes in, so a make after a failed one goes on
            mark(root)
        if step.skip_when and (root / step.skip_when).exists():
            print(SKIPPED.format(step=step.name, path=step.skip_when), flush=True)
            continue
        t = time.monotonic()
        if step.name == "project checkout" and (left_behind := committed_inside(Path(step.argv[2]))):
            raise ConfigError(left_behind)
        if step.name == "project checkout" and (in_the_way := changes_in_the_way(Path(step.argv[2]))):
            raise ConfigError(CHANGED_BOTH_WAYS.format(copy=step.argv[2], files=", ".join(in_the_way), paths=" ".join(in_the_way)))
        if step.name == "apt update":  # the root resolves names and trusts certificates as this machine does
            shutil.copyfile("/etc/resolv.conf", root / "etc" / "resolv.conf")
            if CA_BUNDLE.is_file():
                shutil.copyfile(CA_BUNDLE, root / CA_BUNDLE.relative_to("/"))
        if step.argv[0] == "chroot":
            with bound(root):
                run(step.argv, what=step.name, on_line=_show)
        else:
            run(step.argv, what=step.name, on_line=_show)
        print(f"rocm_root: {step.name}: done in {time.monotonic() - t:.1f} s", flush=True)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tools/rocm_root.py", description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make", help="make or refresh the root")
    make.add_argument("root")
    make.add_argument("--mirror", default=MIRROR, help="the Debian archive (default: %(default)s)")
    make.add_argument("--fork-git", type=Path, help="a local clone of the fork, copied to /src/fork.git for --remote")
    make.add_argument(
        "--project", type=Path, default=Path(__file__).resolve().parents[1], help="the onebit-ci checkout to copy (default: this one)"
    )
    make.add_argument("--dry-run", action="store_true")
    session = sub.add_parser("run", help="run a nox session inside the root")
    session.add_argument("root")
    session.add_argument("session")
    session.add_argument("--dry-run", action="store_true")
    own, rest = (list(argv[: argv.index("--")]), list(argv[argv.index("--") + 1 :])) if "--" in argv else (list(argv), [])
    args = parser.parse_args(own)
    args.args = rest  # the session's own, after --
    return args


def mark(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    if not (root / MARKER).is_file():
        write_atomic(root / MARKER, MARKER_TEXT)


def made_here(root: Path) -> bool:
    """``root`` is a root that ``make`` made (or began): it holds MARKER, or, made before MARKER, a Debian system with
    the project's copy in it."""
    return (root / MARKER).is_file() or all((root / path).exists() for path in MADE_BEFORE_MARKER)


def shown_root(given: str, root: Path) -> str:
    """ROOT as given, and where it resolves to when that is elsewhere (a relative path, a link, a ``..``)."""
    return given if given.rstrip("/") == str(root) else RESOLVES_TO.format(given=given, path=root)


def root_problem(given: str, root: Path, project: Path) -> str | None:
    """Why ``root`` (as given, and resolved) cannot be the Debian root: steps write into it, chroot into it and bind
    /proc and /dev under it, so it must be a directory of its own, neither / nor the project nor around it, and
    nowhere in this machine's own system."""
    if not given.strip():
        return EMPTY_ROOT
    if root == Path(root.anchor):
        return HOST_ROOT.format(root=given)
    if root == project or root in project.parents:
        return HOLDS_PROJECT.format(root=given, relation="is" if root == project else "holds", project=project)
    if project in root.parents:
        return HOLDS_PROJECT.format(root=given, relation="is inside", project=project)
    shown = shown_root(given, root)
    for place in (*SHARED_PLACES, *OWN_PLACES_IN_SYSTEM):
        if root == Path(place):
            return SHARED_PLACE.format(root=shown, place=place, example=f"{place}/rocm-root")
    if any(Path(place) in root.parents for place in OWN_PLACES_IN_SYSTEM):
        return None
    top = root.parts[1]
    if any(fnmatch.fnmatchcase(top, tree) for tree in SYSTEM_TREES):
        relation = IS if len(root.parts) == 2 else IS_INSIDE.format(system=f"/{top}")
        return SYSTEM_DIRECTORY.format(root=shown, relation=relation)
    return None


def make_problem(given: str, root: Path) -> str | None:
    """Why ``make`` cannot put a Debian root at ``root``: only a new or empty directory, or a root it made, takes one
    (debootstrap into a directory of someone's files mixes a system into them)."""
    shown = shown_root(given, root)
    try:
        if not root.exists() or (root.is_dir() and (made_here(root) or next(root.iterdir(), None) is None)):
            return None
    except OSError as exc:
        return f"ROOT {shown}: {exc.strerror}"
    if not root.is_dir():
        return NOT_A_DIRECTORY.format(root=shown)
    return NOT_EMPTY.format(root=shown, marker=MARKER)


def exit_status(returncode: int) -> int:
    """A program's status as a shell gives it: a signal's 128 + its number."""
    return 128 - returncode if returncode < 0 else returncode


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        root = Path(args.root).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a link loop, before Python 3.13
        print(ERROR.format(message=UNRESOLVABLE.format(root=args.root, problem=exc)), file=sys.stderr)
        return 2
    project = (args.project if args.command == "make" else Path(__file__).parents[1]).resolve()
    problem = root_problem(args.root, root, project)
    if problem is None and args.command == "make":
        problem = NOTHING_AFTER_DASHES.format(args=" ".join(args.args)) if args.args else make_problem(args.root, root)
    if problem is not None:
        print(ERROR.format(message=problem), file=sys.stderr)
        return 2
    if args.command == "make":
        steps = make_plan(root, args.project.resolve(), args.mirror, args.fork_git.resolve() if args.fork_git else None)
    else:
        steps = run_plan(root, args.session, args.args)
    if args.dry_run:
        print("\n".join(s.line() for s in steps))
        return 0
    if os.geteuid() != 0:
        print(ERROR.format(message="chroot and mount need root; run it as root (sudo)"), file=sys.stderr)
        return 2
    if args.command == "make" and args.fork_git and not ((args.fork_git / "HEAD").is_file() or (args.fork_git / ".git").exists()):
        print(ERROR.format(message=NOT_A_FORK_CLONE.format(path=args.fork_git)), file=sys.stderr)
        return 2
    if args.command == "run" and not (root / PROJECT_IN_ROOT.lstrip("/")).is_dir():
        print(ERROR.format(message=f"{root} has no {PROJECT_IN_ROOT}: run tools/rocm_root.py make {args.root} first"), file=sys.stderr)
        return 2
    try:
        with signals_as_interrupt():  # SIGTERM and SIGHUP unbind /proc and /dev as Ctrl-C does
            execute(root, steps)
    except CommandFailed as exc:
        print(ERROR.format(message=exc.message), file=sys.stderr)
        # run: the session's own status (nox's), as nox -s SESSION outside a root would give it; make: a step's
        return exit_status(exc.returncode) if args.command == "run" else exc.exit_code
    except OnebitError as exc:
        print(ERROR.format(message=exc.message), file=sys.stderr)
        return exc.exit_code
    except Terminated as exc:
        print(INTERRUPTED_BY.format(signal=exc), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    except OSError as exc:  # the disk or a copy (resolv.conf, the CA bundle): one line, not a traceback
        print(ERROR.format(message=f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
