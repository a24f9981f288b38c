"""``nox -s try -- REF``: build and gate a fork commit that is not the pin (a pull request's head, a side branch, a
commit of another fork) before it merges, in ``build/try/<sha12>/``, never touching pins.yaml, the submodule or the
release ledger.

The job is the project's with its pin moved to the tried commit (:func:`tried_job`). Its records carry the key
``try:<build key>``, which ship never counts. The build and gates run in a mount namespace of the try's own, its
checkout and build bound over the project's, where the gates look for the pin's. For a user: docs/try.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ci.command import run
from ci.commands import job_of, say
from ci.commands.gpu_tests import sealed, under_test, watched_run
from ci.commands.job import Job
from ci.compile.cmake import BuildPlan, BuildRequest
from ci.compile.stage import CurrentBuild, run_build
from ci.errors import ConfigError, GateFailed, GitError, OnebitError, Refused, ToolchainError
from ci.files import shown, write_atomic
from ci.gates import results
from ci.gates.registry import select
from ci.gates.results import GateResult
from ci.gates.selftest.run import private_mounts
from ci.gates.serving.launcher import process_bytecode, with_bytecode
from ci.git import Git, is_checked_out
from ci.release import binding, compile_record, ledger, post, records
from ci.release.figures import TRY_DIR, TRY_PREFIX
from ci.source import sync
from ci.source.op_cases import counts_at
from ci.source.store import HEX_RE, PULLS, ForkStore
from ci.source.sync import RECORD, Source

STORE = "fork.git"  # build/try/fork.git: what every try fetched; each try's own store borrows from it
KEY_PREFIX = TRY_PREFIX
BUILD_ROW = "build"  # the verdict's row when the commit did not build (or its gates could not start)
SUMMARY = "try.json"
PR_RE = re.compile(r"^(?:refs/pull/(\d+)/head|pull/(\d+)|#(\d+)|(\d{1,6}))$")

# Messages, shared with the tests that match on them (tests/support/messages.py)
TRYING = "try: {label} = {sha} ({where}), profile {profile}: {folder}"
IS_THE_PIN = "{ref} is the pin itself ({sha}); nox -s gpu_tests gates it"
NO_SUCH_PULL = "pull request {number} is not in {where} (it serves no pull refs, or there is none); give its head commit"
NO_SUCH_REF = '"{ref}" is neither a pull request (refs/pull/N/head, pull/N, #N), a branch of {where} nor a commit id'
COUNT_SAID = "try: test-backend-ops {op}: pins.yaml says {said}, {label} lists {listed}; the gate judges pins.yaml's, as a bump would"
INCREMENTAL = "try: from a copy of the pin's {profile} build and checkout, in a mount namespace of its own"
FRESH = "try: a fresh checkout and build, in a mount namespace of its own ({why})"
NO_PIN_BUILD = "the pin has no current {profile} build to start from"
NO_NAMESPACE = (
    "try: unshare gives no mount namespace here, and a try's gates must see the commit's source and build at the project's "
    "paths without touching them; run it where unshare --mount --map-root-user works (user namespaces on), as gate_selftest needs"
)
NOT_THE_PIN = "{name} is not the pin + the series as this tool left it"
FIRST_FRESH = "as the first try of this commit was"
GATED = "try: {label}: {verdict}; records in {ledger} (build key {key}, never counted by ship)"
VERDICT_PASSED = "every gate passed"
VERDICT_FAILED = "{failed} of {total} gates did not pass: {gates}"
POST_FLAGS = "{flags}: with --post only (it sets the status and writes the comment; --dry-run prints them)"
INNER_FAILED = "try: the build and gates in the try's mount namespace ended with status {code}, no verdict written"
ERROR_PREFIX = "onebit-ci: error: "  # ci.cli.ERROR's start: the namespace's run says its error so


@dataclass(frozen=True)
class Tried:
    """The commit a try gates, and what named it."""

    sha: str
    label: str  # as the user named it: "pull/7", "branch side", "commit 3f2a1b0"
    pr: int | None = None


@dataclass(frozen=True)
class TryRequest:
    ref: str
    profile: str
    url: str | None = None  # the fork the commit is on (another fork's https URL); default pins.yaml's
    remote: str | None = None  # where to fetch from (a URL or a local mirror); default --url, else pins.yaml's
    gates: tuple[str, ...] = ()
    options: Any = None  # GateOptions
    post: post.PostRequest | None = None
    jobs: int | None = None  # compile jobs (default: ninja's)


@dataclass(frozen=True)
class TryPlace:
    """Where a try keeps everything: ``build/try/<sha12>/`` (src, fork.git, build/<profile>, results)."""

    root: Path
    sha: str

    @property
    def work(self) -> Path:
        return self.root / TRY_DIR / self.sha[:12]

    @property
    def src(self) -> Path:
        return self.work / "src"

    @property
    def gitdir(self) -> Path:
        return self.work / STORE

    @property
    def build_root(self) -> Path:
        return self.work / "build"

    @property
    def results(self) -> Path:
        return self.work / "results"

    @property
    def ledger(self) -> Path:
        return ledger.ledger_path(self.results)

    @property
    def summary(self) -> Path:
        return self.results / SUMMARY


@dataclass(frozen=True)
class GateRow:
    gate: str
    verdict: str
    seconds: float
    summary: str
    line: int | None = None


@dataclass(frozen=True)
class TryOutcome:
    """What a try found, as try.json keeps it (the posting and the report read it)."""

    tried: Tried
    profile: str
    build_key: str
    build_seconds: float
    up_to_date: bool
    gates: tuple[GateRow, ...] = ()
    counts: tuple[tuple[str, int, int | None], ...] = ()  # (op, pins.yaml's, the commit's or None)
    incremental: bool = False
    url: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.gates) and all(g.verdict == "passed" for g in self.gates)

    def to_json(self) -> dict[str, Any]:
        return {
            "sha": self.tried.sha, "label": self.tried.label, "pr": self.tried.pr, "profile": self.profile, "url": self.url,
            "build_key": self.build_key, "build_seconds": round(self.build_seconds, 1), "up_to_date": self.up_to_date,
            "incremental": self.incremental,
            "gates": [{"gate": g.gate, "verdict": g.verdict, "seconds": round(g.seconds, 1), "summary": g.summary, "line": g.line} for g in self.gates],
            "counts": [{"op": op, "pins": said, "commit": listed} for op, said, listed in self.counts],
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TryOutcome:
        tried = Tried(str(data["sha"]), str(data["label"]), int(data["pr"]) if data.get("pr") is not None else None)
        gates = tuple(GateRow(str(g["gate"]), str(g["verdict"]), float(g["seconds"]), str(g["summary"]), g.get("line")) for g in data["gates"])
        counts = tuple((str(c["op"]), int(c["pins"]), c["commit"]) for c in data.get("counts", []))
        return cls(
            tried, str(data["profile"]), str(data["build_key"]), float(data["build_seconds"]), bool(data["up_to_date"]), gates, counts,
            bool(data.get("incremental")), str(data.get("url", "")),
        )  # fmt: skip


# -- the tried commit ------------------------------------------------------------------------------------------------


def resolve_ref(store: ForkStore, ref: str, where: str) -> Tried:
    """A pull request (``refs/pull/N/head``, ``pull/N``, ``#N``, or a bare number of up to 6 digits), a branch
    (``refs/heads/B`` or its name) or a commit id (4+ hex digits) of the store's fork."""
    pr = PR_RE.match(ref)
    if pr:
        number = int(next(g for g in pr.groups() if g))
        found = store.repo.references.get(f"{PULLS}{number}")
        if found is None:
            raise GitError(NO_SUCH_PULL.format(number=number, where=where))
        return Tried(str(found.peel().id), f"pull/{number}", number)
    name = ref.removeprefix("refs/heads/")
    if name in store.branches():
        return Tried(str(store.branch_tip(name)), f"branch {name}")
    if not HEX_RE.match(ref):
        if ref.startswith("refs/heads/"):
            store.branch_tip(name)  # the branch's own refusal: the fork's branches, the closest
        raise ConfigError(NO_SUCH_REF.format(ref=ref, where=where))
    sha = str(store.resolve(ref).id)
    return Tried(sha, f"commit {sha[:7]}")


def tried_job(job: Job, sha: str, url: str | None) -> Job:
    """The project's job with its pin moved to ``sha`` (and ``url``), frozen: the build key, the build_commit the
    backend_ops gate expects and the source all follow; pins.yaml's expectations are kept, as a bump keeps them."""
    fork = replace(job.pins.fork, commit=sha, url=url or job.pins.fork.url)
    return replace(job, pins=replace(job.pins, fork=fork), session="try")


def fetch(job: Job, request: TryRequest, say: Callable[[str], None]) -> tuple[ForkStore, str]:
    """The try's fetch store (``build/try/fork.git``) with every branch and pull request of the fork: the project's
    own store is never fetched into (a fetch replaces its refs)."""
    store = ForkStore.open(job.root / TRY_DIR / STORE)
    where = request.remote or request.url or job.pins.fork.url
    say(f"fetching {where}")
    say(f"fetched {store.sync(where)}")
    return store, where


# -- the try's own checkout and build -------------------------------------------------------------------------------


def can_unshare() -> bool:
    """Whether ``unshare`` makes a mount namespace here (a container may forbid user namespaces)."""
    if shutil.which("unshare") is None:
        return False
    return subprocess.run([*private_mounts(), "true"], capture_output=True, check=False).returncode == 0


def prepare(job: Job, place: TryPlace, fetched: ForkStore, profile: str) -> tuple[bool, str]:
    """The try's store (the tried commit's objects, the project store's borrowed) and, the first time, its copy of
    the pin's checkout and build: (incremental, why not) as decided then, and kept by later tries of the commit."""
    mode = place.work / "incremental"
    if place.work.is_dir() and (place.build_root / "ready").is_file():
        return mode.is_file(), "" if mode.is_file() else FIRST_FRESH
    shutil.rmtree(place.work, ignore_errors=True)  # a try that stopped before its folder was whole: begun again
    place.work.mkdir(parents=True)
    store = ForkStore.open(place.gitdir)
    store.sync(str(Path(fetched.repo.path)))
    module = job.project.module_gitdir(job.pins.submodule)
    if (module / "HEAD").is_file():
        store.sync(str(module))  # the pin's objects, for the copy of its checkout (hard links: nothing copied)
    checkout, build_dir = job.root / job.pins.submodule, job.build_dir(job.profile(profile))
    why = _not_incremental(job, profile)
    if why:
        place.src.mkdir()
        (place.build_root / build_dir.name).mkdir(parents=True)
        (place.build_root / "ready").write_text("")
        return False, why
    run(["cp", "-a", "--reflink=auto", str(checkout), str(place.src)], what="cp -a the checkout")
    place.build_root.mkdir(parents=True)
    run(["cp", "-a", "--reflink=auto", str(build_dir), str(place.build_root / build_dir.name)], what="cp -a the build")
    for name in ("index", "HEAD", RECORD, "info/sparse-checkout"):  # the checkout's state: only what moved is rewritten
        if (module / name).is_file():
            (place.gitdir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(module / name, place.gitdir / name)
    git = Git(place.gitdir)
    git.run("config", "core.bare", "false")
    git.run("config", "core.worktree", str(checkout))  # as the namespace sees it: the copy bound over the checkout
    for key in ("core.sparseCheckout", "core.sparseCheckoutCone"):
        value = Git(module).run("config", "--get", key, check=False).output.strip()
        if value:
            git.run("config", key, value)
    (place.src / ".git").write_text(f"gitdir: {place.gitdir}\n")
    mode.write_text("the pin's checkout and build, copied\n")
    (place.build_root / "ready").write_text("")
    return True, ""


def _not_incremental(job: Job, profile: str) -> str:
    """Why a try cannot start from the pin's build here, or ""."""
    from ci.commands.job import current

    if not is_checked_out(job.root / job.pins.submodule):
        return NO_PIN_BUILD.format(profile=profile)
    try:
        current(job, profile)
        exact = sync.prepare(job.source(), ForkStore.open(job.project.module_gitdir(job.pins.submodule))).action is sync.Action.NOTHING
    except OnebitError:
        return NO_PIN_BUILD.format(profile=profile)
    return "" if exact else NOT_THE_PIN.format(name=job.pins.submodule)


# -- build and gate (in the namespace, or here) ----------------------------------------------------------------------


def gate_commit(job: Job, tried: Tried, place: TryPlace, request: TryRequest, say: Callable[[str], None], *, incremental: bool) -> TryOutcome:
    """In the try's namespace (the try's checkout and build bound over the project's): build the tried commit + the
    series and run the gates, each recorded in the try's ledger."""
    tjob = tried_job(job, tried.sha, request.url)
    source = Source(job.pins.submodule, job.root / job.pins.submodule, place.gitdir, tried.sha, tjob.pins.fork.url, job.pins.omit, job.series)
    build_plan = tjob.build_plan(BuildRequest(profile=request.profile, jobs=request.jobs))
    built = run_build(build_plan, source, job.root, None, say)
    build_seconds = built.manifest.seconds  # the compile's, this run's or (up to date) the run's that made it
    build = CurrentBuild(built.manifest, build_plan.build_dir)
    rows = _gates(tjob, build, build_plan, place, request, say)
    listed = counts_at(ForkStore.open(place.gitdir).repo, tried.sha, list(job.pins.expected_cases()))
    counts = tuple((op, n, listed[op].cases) for op, n in job.pins.expected_cases().items())
    outcome = TryOutcome(tried, request.profile, built.manifest.key, build_seconds, built.up_to_date, rows, counts, incremental, tjob.pins.fork.url)
    write_atomic(place.summary, json.dumps(outcome.to_json(), indent=1) + "\n")
    return outcome


def _gates(tjob: Job, build: CurrentBuild, build_plan: BuildPlan, place: TryPlace, request: TryRequest, say: Callable[[str], None]) -> tuple[GateRow, ...]:
    manifest = build.manifest
    key = manifest.key
    out = place.results / key[:12]
    out.mkdir(parents=True, exist_ok=True)
    props = {"build_key": KEY_PREFIX + key, "profile": manifest.profile, "try": manifest.pin_commit}
    done: list[GateResult] = []
    rows: list[GateRow] = []

    def keep(result: GateResult, context: ledger.BuildContext) -> None:
        extra = (("try", manifest.pin_commit), ("build_seconds", f"{manifest.seconds:.1f}"))  # the report's build seconds
        result = replace(result, properties=(*result.properties, *extra))
        line = records.record(result, out, props, ledger_path=place.ledger, build=replace(context, build_key=KEY_PREFIX + key), root=tjob.root)
        say(f"try: {result.gate}: {result.status.value}: {result.summary} (try ledger line {line.line if line else '?'})")
        done.append(result)
        rows.append(GateRow(result.gate, result.status.value, result.seconds, result.summary, line.line if line else None))

    if not request.gates and compile_record.lacks_device(build, build_plan.profile.backend):
        keep(compile_record.result(build), binding.context_of(tjob.pins, manifest))
    else:
        seal = sealed(build)  # as gpu_tests: the build's files hashed, and held through each gate
        target = under_test(tjob, build)  # the last release's figures, read from the release ledger: never written
        judging = binding.judging_now()
        for gate in select(request.gates, tjob.pins):
            say(f"try: {gate.name} ...")
            keep(watched_run(gate, target, request.options, out, seal), binding.context_of(tjob.pins, manifest, judging))
    results.write_junit(out / "try.junit.xml", done, {"build_key": KEY_PREFIX + key, "profile": manifest.profile, "pin": manifest.pin_commit})
    say(records.summary_table(done))
    records.step_summary(records.summary_markdown(done, f"try {manifest.pin_commit[:7]}, profile {manifest.profile}"))
    return tuple(rows)


def _namespaced(job: Job, tried: Tried, place: TryPlace, request: TryRequest) -> TryOutcome:
    """The build and the gates in a mount namespace of the try's own (``try-inner``), its checkout and build bound over
    the project's (an empty folder made for a mount point is removed after); its output streams here, and try.json is
    its answer."""
    unshare = private_mounts()
    inner = [sys.executable, "-m", "ci", "--root", str(job.root), "try-inner", "--work", str(place.work), "--commit", tried.sha, "--label", tried.label]
    inner += ["--profile", request.profile, *(["--url", request.url] if request.url else []), *(["--pr", str(tried.pr)] if tried.pr else [])]
    for gate in request.gates:
        inner += ["--gate", gate]
    options = request.options
    if options is not None:
        inner += ["--timeout", str(options.timeout), "--rounds", str(options.rounds)]
    inner += ["--jobs", str(request.jobs)] if request.jobs else []
    place.summary.unlink(missing_ok=True)
    points = [job.root / job.pins.submodule, job.build_dir(job.profile(request.profile))]
    made = [p for p in points if not p.exists()]
    for p in made:
        p.mkdir(parents=True)
    try:
        # the environment as it is (the ledger's key reads the release ledger; the child hides it as this process does)
        code, error = _streamed([*unshare, "--", *inner], with_bytecode(os.environ, process_bytecode()))
    finally:
        for p in made:
            with contextlib.suppress(OSError):  # left when something wrote into it: never removed with its files
                p.rmdir()
    if not place.summary.is_file():
        raise Ended(error or INNER_FAILED.format(code=code), code)
    return TryOutcome.from_json(json.loads(place.summary.read_text(encoding="utf-8")))


class Ended(OnebitError):
    """The namespace's run ended without its answer (a compile that failed, a refusal): its own error, and its own exit
    status, which a CI step and the tests read as the command's."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = code if 0 < code < 128 else OnebitError.exit_code


def _streamed(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``argv``, its output passed on line by line as it comes but its error line kept: (its exit status, that
    line's message)."""
    from ci.processes import end_tree

    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    error = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(ERROR_PREFIX):  # said once, by this process, as the try's own error
                error = line[len(ERROR_PREFIX) :].strip()
                continue
            sys.stdout.write(line)
            sys.stdout.flush()
        return proc.wait(), error
    except BaseException:
        end_tree(proc)
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


def inner(args: argparse.Namespace) -> int:
    """``try-inner``, in the try's mount namespace: bind the copies over the project's paths, then build and gate."""
    job = job_of(args)
    place = TryPlace(job.root, args.commit)
    if Path(args.work).resolve() != place.work.resolve():
        raise ConfigError(f"--work {args.work}: not the try folder of {args.commit[:12]} ({shown(place.work, job.root)})")
    checkout, build_dir = job.root / job.pins.submodule, job.build_dir(job.profile(args.profile))
    for copy, over in ((place.src, checkout), (place.build_root / build_dir.name, build_dir)):
        run(["mount", "--bind", str(copy), str(over)], what="mount --bind")
    from ci.gates.target import GateOptions

    request = TryRequest(args.commit, args.profile, args.url, None, tuple(args.gate), GateOptions(timeout=args.timeout, rounds=args.rounds), jobs=args.jobs)
    tried = Tried(args.commit, args.label, args.pr)
    gate_commit(job, tried, place, request, say, incremental=(place.work / "incremental").is_file())
    return 0


# -- the session -----------------------------------------------------------------------------------------------------


def session(job: Job, request: TryRequest, say: Callable[[str], None]) -> TryOutcome:
    """Fetch, name the commit, prepare its folder, build and gate it, post the verdict when asked."""
    job.toolchain(job.profile(request.profile))  # a missing toolchain is refused before anything is fetched
    if not can_unshare():
        raise ToolchainError(NO_NAMESPACE)
    fetched, where = fetch(job, request, say)
    tried = resolve_ref(fetched, request.ref, where)
    if tried.sha == job.pins.fork.commit:
        raise Refused(IS_THE_PIN.format(ref=request.ref, sha=tried.sha[:12]))
    place = TryPlace(job.root, tried.sha)
    say(TRYING.format(label=tried.label, sha=tried.sha[:12], where=where, profile=request.profile, folder=shown(place.work, job.root)))
    for op, c in counts_at(fetched.repo, tried.sha, list(job.pins.expected_cases())).items():
        said = job.pins.expected_cases()[op]
        if c.cases is not None and c.cases != said:
            say(COUNT_SAID.format(op=op, said=said, label=tried.label, listed=c.cases))
    incremental, why = prepare(job, place, fetched, request.profile)
    say(INCREMENTAL.format(profile=request.profile) if incremental else FRESH.format(why=why))
    started = time.monotonic()
    try:
        outcome = _namespaced(job, tried, place, request)
    except OnebitError as exc:  # the commit does not build, or its gates could not run: the PR is told so too
        if request.post is not None:
            line = post.GateLine(BUILD_ROW, "error", time.monotonic() - started, exc.message.splitlines()[0])
            failed = post.Verdict(tried.sha, tried.label, request.profile, "", (line,), time.monotonic() - started, incremental, pr=tried.pr)
            post.post_verdict(failed, request.post, say)
        raise
    if request.post is not None:
        post.post_verdict(verdict_of(outcome, request.post), request.post, say)
    return outcome


def verdict_of(outcome: TryOutcome, request: post.PostRequest) -> post.Verdict:
    """What posting says of the outcome: a state, a line, the gate table."""
    return post.Verdict(
        sha=outcome.tried.sha, label=outcome.tried.label, profile=outcome.profile, build_key=outcome.build_key,
        gates=tuple(post.GateLine(g.gate, g.verdict, g.seconds, g.summary) for g in outcome.gates),
        build_seconds=outcome.build_seconds, incremental=outcome.incremental,
        counts=outcome.counts, pr=outcome.tried.pr, up_to_date=outcome.up_to_date,
    )  # fmt: skip


def main(args: argparse.Namespace) -> int:
    from ci.gates.target import GateOptions

    given = [flag for flag, value in (("--dry-run", args.dry_run), ("--repo", args.repo), ("--pr", args.pr), ("--api", args.api)) if value]
    if given and not args.post:
        raise ConfigError(POST_FLAGS.format(flags=", ".join(given)))
    job = job_of(args)
    posting = post.request_of(args, job.pins.fork.url) if args.post else None
    options = GateOptions(timeout=args.timeout, rounds=args.rounds)
    request = TryRequest(args.ref, args.profile, args.url, args.remote, tuple(args.gate), options, posting, args.jobs)
    outcome = session(job, request, say)
    failed = [g for g in outcome.gates if g.verdict != "passed"]
    place = TryPlace(job.root, outcome.tried.sha)
    verdict = VERDICT_FAILED.format(failed=len(failed), total=len(outcome.gates), gates=", ".join(g.gate for g in failed)) if failed else VERDICT_PASSED
    say(GATED.format(label=outcome.tried.label, verdict=verdict, ledger=shown(place.ledger, job.root), key=KEY_PREFIX + outcome.build_key[:12]))
    if failed or not outcome.gates:
        raise GateFailed(f"try: {verdict}")
    return 0

