"""The command line of ``python -m ci``: every command's options, each option and its default defined once."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from ci import defaults as d
from ci.schema import did_you_mean

PROFILES = "gfx1151 (default), gfx1100, gfx1201, cuda, vulkan, cpu"
DEVICES = ["auto", "rocm", "vulkan", "cuda", "cpu"]
BENCH_PROTOCOLS = ("seeds", "completion")  # ci.gates.serving.protocol.PROTOCOLS' names (a test holds them equal)

# Messages, shared with the tests that match on them (tests/support/messages.py)
UNKNOWN_ARGUMENT = "unrecognized argument {argument}{suggestion}"
DID_YOU_MEAN = ' (did you mean "{choice}"?)'  # serve.errors' wording, which ci.schema.did_you_mean gives
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)'")


class Parser(argparse.ArgumentParser):
    """A flag is taken only as spelled (``--profil`` is not ``--profile``), and what is not known is refused by the
    command that was typed, naming the closest flag or command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:  # type: ignore[override]
        ns, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:  # a command's own parser: its unknowns are its to name
            word = extras[0]
            known = [s for action in self._actions for s in action.option_strings]
            self.error(UNKNOWN_ARGUMENT.format(argument=word, suggestion=did_you_mean(word, known) if word.startswith("-") else ""))
        return ns, extras

    def error(self, message: str) -> NoReturn:
        choice = _INVALID_CHOICE.search(message)
        if choice and self._subparsers is not None:
            commands = [name for action in self._subparsers._group_actions for name in (getattr(action, "choices", None) or {})]
            message += did_you_mean(choice.group(1), commands)
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _profile(p: argparse.ArgumentParser, what: str, default: str = "gfx1151") -> None:
    p.add_argument("--profile", default=default, help=f"{what}: {PROFILES}")


def _remote(p: argparse.ArgumentParser) -> None:
    p.add_argument("--remote", help="fetch from this URL or local mirror first (else pins.yaml's url, when the pinned commit is missing)")


def _timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=d.TIMEOUT, metavar="S", help=f"seconds per test-backend-ops run (default {d.TIMEOUT:g})")


def _out(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--out", metavar="DIR", help=f"where {what} go")


def parser(commands: Mapping[str, Callable[[argparse.Namespace], int]]) -> argparse.ArgumentParser:
    top = Parser(prog="onebit-ci", description="Build-and-test orchestration for the pinned ROCmFPX fork.")
    top.add_argument("--root", help="the onebit-ci checkout (default: the nearest directory with pins.yaml)")
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = top.add_subparsers(dest="command", required=True, parser_class=Parser)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
        p.set_defaults(func=commands[name])
        return p

    command("verify-pin", "check pins.yaml, .gitmodules, the gitlink and the checkout agree")

    p = command("bump-pin", "move the pin to another commit of the pinned branch")
    p.add_argument("commit", help="the new commit: full or abbreviated (4+ hex digits), or head: the tip of the branch")
    _remote(p)
    p.add_argument("--branch", help="the branch the new pin must be on (default: pins.yaml's fork.branch)")
    p.add_argument("--allow-rollback", action="store_true", help="allow a commit behind or beside the current pin")
    p.add_argument("--reference", help='a human name for the new pin, e.g. "ROCmFPX#4"')
    p.add_argument("--report", help="where to write the markdown report (default: build/bump-report.md)")
    p.add_argument("--drop-upstreamed", action="store_true", help="remove patches the new commit already has from the series")
    p.add_argument("--url", help="the https:// URL of the fork the new pin is on, recorded in pins.yaml and .gitmodules (default: --remote when it is one)")
    p.add_argument("--no-compile", action="store_true", help="no gfx1151 compile verdict in the report, even where its toolchain is")
    p.add_argument("--accept-counts", action="store_true", help="pins.yaml takes the new pin's test-backend-ops case counts where they differ (read from its tests/test-backend-ops.cpp)")

    p = command("patches", "bring the checkout to the pin with the patch series applied (or --check the series)")
    p.add_argument("--check", action="store_true", help="apply nothing; print each patch's fate: applies, already upstream, conflicts")
    p.add_argument("--reset", action="store_true", help="discard changes in the checkout that this tool did not make, then apply")
    _remote(p)

    p = command("export-patches", "write the series back from the commits of a local branch of the checkout")
    p.add_argument("--branch", required=True, help="a branch of the checkout that starts at the pin, one commit per patch")

    p = command("build", "check out the pin, apply the patches, configure and compile a profile")
    _profile(p, "the profile to build")
    p.add_argument("--build-type", default="Release", help="CMAKE_BUILD_TYPE (default Release)")
    p.add_argument("-D", "--define", action="append", default=[], metavar="NAME=VALUE",
                   help="a CMake flag for this build alone (a machine's own flags go in ONEBIT_CMAKE_ARGS or cmake-args.local)")  # fmt: skip
    p.add_argument("--target", action="append", default=[], help="a target to build (default: pins.yaml build.targets)")
    _remote(p)
    p.add_argument("--build-dir", help="the directory holding one build dir per profile (default: build/)")
    p.add_argument("-j", "--jobs", type=int, help="parallel compile jobs (default: ninja's)")

    p = command("gpu-tests", "every gate against the current build's binaries; results to the ledger")
    _profile(p, "whose build to test")
    p.add_argument("--gate", action="append", default=[], help="run only this gate (a name of the registry, ci/gates/registry.py; an unknown one lists them); repeatable")
    p.add_argument("--from-log", metavar="FILE", help="judge a saved test-backend-ops console log with the profile's device and the pin; run nothing")
    p.add_argument("--from-sql", metavar="FILE", help="with --from-log: its --output sql output")
    _timeout(p)
    p.add_argument("--model", help="the equivalence gate's target GGUF (default: pins.yaml equivalence, else tiny models)")
    p.add_argument("--drafter", help="the equivalence gate's drafter GGUF")
    p.add_argument("--tokens", type=int, help="tokens per prompt for the equivalence gate (default: pins.yaml, 256)")
    p.add_argument(
        "--rounds", type=int, default=d.PERF_MAX_ROUNDS,
        help=f"the most rounds of the perf gate, each running both configs once: it looks after {d.PERF_ROUNDS} and every 2 more, and stops when every check is settled (default {d.PERF_MAX_ROUNDS}; at least {d.PERF_ROUNDS} are measured)",
    )  # fmt: skip
    _out(p, "the JSON, JUnit and logs (default: build/results/<key>/)")

    p = command("ship", "build the serve launcher's wheel and sdist if every gate passed for the current build")
    _profile(p, "whose build ships")
    p.add_argument("--check", action="store_true", help="only say which gates passed, failed, are missing or stale")
    p.add_argument("--dist", help="where the wheel, sdist and release manifest go (default: dist/)")

    p = command("gate-selftest", "plant known faults in copies of the pinned fork, each on its own, and expect each gate to catch its own")
    _profile(p, "whose build to start from")
    p.add_argument("--faults", metavar="FILE", help="the faults (default: ci/gates/selftest/faults.yaml)")
    p.add_argument("--fault", action="append", default=[], metavar="ID", help="only this fault; repeatable")
    p.add_argument("--jobs", type=int, default=0, metavar="N", help="faults rebuilt and judged at once (default 0: one per 4 cores)")
    p.add_argument("--keep", action="store_true", help="keep each fault's copies of the checkout and the build (build/selftest/)")
    p.add_argument("--fault-timeout", type=float, default=d.FAULT_TIMEOUT, metavar="S", help="end a fault's rebuild and gates after S seconds (default %(default)g)")

    p = sub.add_parser("selftest-fault")  # gate-selftest runs it in each fault's own mount namespace
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
    p.add_argument("--profile", required=True)
    p.add_argument("--fault", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--faults")
    p.set_defaults(func=commands["selftest-fault"])

    p = command("main-job", "what nox runs by default: verify the pin; build, gate and check shipping where the toolchain is")
    p.add_argument("--profile", default=None, help=f"the profile (default: $ONEBIT_PROFILE, else gfx1151): {PROFILES}")
    _remote(p)

    p = command("bisect", "name the fork commit that broke a gate: git bisect, each step built incrementally and judged by the one gate")
    _profile(p, "whose build dir each step builds in", os.environ.get("ONEBIT_PROFILE", "gfx1151"))
    p.add_argument("--good", metavar="SHA", help="a commit where the gate passes (default: the pin; the bump's start when the pin is its target)")
    p.add_argument("--bad", metavar="SHA", help="a commit where it fails (default: the target of the bump report)")
    p.add_argument("--gate", help="the gate that judges each step (default: the newest failed one of the profile in the ledger)")
    _remote(p)
    p.add_argument("--max-steps", type=int, metavar="N", help="stop after N steps and say the range left")
    p.add_argument("--check-good", action="store_true", help="build and judge the good end first; stop when it does not pass")
    p.add_argument("--bump-report", metavar="FILE", help="the bump report the defaults come from (default: build/bump-report.md)")
    p.add_argument("--expect", action="append", default=[], metavar="OP=N", help="with --gate backend_ops: cases of OP each step must run and pass, in place of pins.yaml's (the pin's counts)")
    p.add_argument("--rounds", type=int, default=d.PERF_MAX_ROUNDS, help=f"with --gate perf: the most rounds per step (default {d.PERF_MAX_ROUNDS}; a check still inconclusive then skips the step)")
    _timeout(p)
    p.add_argument("--out", metavar="FILE", help="where the markdown report for the bump PR goes (default: build/bisect/report.md)")

    p = command("try", "build and gate a fork commit that is not the pin (a pull request's head, a branch, another fork's commit) in build/try/<sha>/, nothing of the pin's touched")
    p.add_argument("ref", help="refs/pull/N/head, pull/N, #N or N (a pull request), a branch of the fork, or a commit id (4+ hex digits)")
    p.add_argument("--url", help="the https:// URL of the fork the commit is on (default: pins.yaml's fork.url); it is fetched unless --remote is given")
    _remote(p)
    _profile(p, "the profile to build and gate", os.environ.get("ONEBIT_PROFILE", "gfx1151"))
    p.add_argument("--gate", action="append", default=[], help="run only this gate (default: every gate ship requires); repeatable")
    _timeout(p)
    p.add_argument("--rounds", type=int, default=d.PERF_MAX_ROUNDS, help=f"the most rounds of the perf gate (default {d.PERF_MAX_ROUNDS})")
    p.add_argument("--post", action="store_true", help="set a commit status on the commit and write (or update) the pull request's comment (docs/try.md)")
    p.add_argument("--dry-run", action="store_true", help="with --post: print the requests it would make; send nothing")
    p.add_argument("--repo", help="with --post: OWNER/NAME of the fork on GitHub (default: from --url, else pins.yaml's url)")
    p.add_argument("--pr", type=int, help="with --post: the pull request to comment on (default: REF's, when it names one)")
    p.add_argument("--run-url", help="with --post: the run's page, linked from the status and the comment (default: this GitHub Actions run's)")
    p.add_argument("--report-url", help="with --post: the report's page, linked from the comment")
    p.add_argument("--api", help="with --post: GitHub's API root (default: $ONEBIT_GITHUB_API, else https://api.github.com)")
    p.add_argument("-j", "--jobs", type=int, help="parallel compile jobs (default: ninja's)")

    p = sub.add_parser("try-inner")  # try runs it in the try's own mount namespace
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
    for flag in ("--work", "--commit", "--label", "--profile"):
        p.add_argument(flag, required=True)
    p.add_argument("--url")
    p.add_argument("--pr", type=int)
    p.add_argument("--gate", action="append", default=[])
    _timeout(p)
    p.add_argument("--rounds", type=int, default=d.PERF_MAX_ROUNDS)
    p.add_argument("--jobs", type=int)
    p.set_defaults(func=commands["try-inner"])

    p = command("report", "a static site from one or more ledgers: a table per pin and profile, charts of every figure across pins")
    p.add_argument("--out", required=True, metavar="DIR", help="the site's folder (index.html, one SVG per chart)")
    p.add_argument("ledgers", nargs="*", metavar="LEDGER", help="ledger.jsonl files (default: build/results/ledger.jsonl and every try's)")
    p.add_argument("--title", default="onebit-ci: the gates across pins", help="the page's title")

    p = command("matrix", "the GitHub Actions matrix of the GPU job, as JSON: a runner and device per profile")
    p.add_argument("--profiles", default="gfx1151", help="comma-separated profiles (default gfx1151)")

    p = command("backend-ops", "the test-backend-ops gate: run it on a device (or judge a saved log) against the pin")
    p.add_argument("--binary", help="the build's test-backend-ops (not needed with --from-log)")
    p.add_argument("--device", required=True, help="the test-backend-ops device to test: ROCm0, CUDA0, Vulkan0, CPU, ...")
    p.add_argument("--expect", action="append", default=[], metavar="OP=N", help="cases of OP that must run and pass (default: pins.yaml expect.backend_ops)")
    p.add_argument("--from-log", metavar="FILE", help="judge this saved console log instead of running anything")
    p.add_argument("--from-sql", metavar="FILE", help="with --from-log: its --output sql output, for the build_commit cross-check")
    p.add_argument("--pinned-commit", metavar="SHA", help="build_commit must be this commit (default: pins.yaml fork.commit; 'none' skips the check)")
    p.add_argument("--patched", action="store_true", help="patches are applied to the build: build_commit must end in -dirty")
    p.add_argument("--dirty", choices=["clean", "dirty"], help="override the -dirty rule (default: dirty exactly when --patched)")
    p.add_argument("--build-key", default="", help="the build key of the binaries, recorded in the results")
    _timeout(p)
    _out(p, "backend_ops.json, backend_ops.junit.xml and the logs (default: build/gates)")

    p = command("kernelforge", "write the seed's KernelForge task for the delta-net kernel from the pin and the profile's build")
    _profile(p, "whose build the task's driver runs against")
    p.add_argument("--out", required=True, help="the task's folder (new, empty, or an earlier task's, which is replaced)")

    p = command("shape-models", "write a real-shaped model set (the 27B's shapes, generated weights), cached where the perf gate finds it")
    p.add_argument("--set", default="real", help="real (the engine's pair and a MoE file at their real shapes) or reduced (four layers, for the CPU)")
    p.add_argument("--out", metavar="DIR", help="write into DIR/SET (default: $ONEBIT_SHAPES_CACHE, else onebit-ci's cache folder)")
    p.add_argument("--roles", metavar="R,R", help="only these models: target, drafter, moe (default: all three)")
    p.add_argument("--jobs", type=int, metavar="N", help="writer threads (default: one per core)")

    p = command("tiny-models", "write the gates' tiny GGUF models: the llama set (target, near and far drafters, other target) and the engine's qwen35 class (target, near, DFlash and MTP drafters)")
    p.add_argument("--out", required=True, help="directory to write them in")

    p = command("equivalence", "greedy output with the drafter must equal the output without it, and the drafter must draft")
    p.add_argument("--model", required=True, help="the target GGUF")
    p.add_argument("--drafter", required=True, help="the drafter GGUF (architecture dflash goes through serve --dflash)")
    p.add_argument("--llama-server", help="the llama-server binary to test (default: the current build of --profile)")
    p.add_argument("--profile", default=None, help=f"whose build's llama-server runs when --llama-server is not given (default: $ONEBIT_PROFILE, else gfx1151): {PROFILES}")
    p.add_argument("--spec-type", help="serve the drafter as -md D --spec-type T (default: --dflash for a dflash drafter, else draft-simple)")
    p.add_argument("--prompts", help="a directory of *.txt prompts replacing the committed code, prose and short")
    p.add_argument("--tokens", type=int, default=d.TOKENS, help=f"tokens to compare per prompt (default {d.TOKENS})")
    p.add_argument("--near-tie", type=float, default=d.NEAR_TIE, metavar="NATS", help=f"a first difference at a baseline top-2 margin at or under this is a near-tie (default {d.NEAR_TIE:g})")
    p.add_argument("--device", choices=DEVICES, help="serve's --device (default: the profile's; auto with --llama-server)")
    p.add_argument("-c", "--ctx-size", type=int, default=d.CONTEXT, help=f"context size of both servers (default {d.CONTEXT})")
    p.add_argument("--build-key", default="", help="the build key of the llama-server, recorded in the results")
    _out(p, "equivalence.json, equivalence.junit.xml and the server logs (default: build/gates)")

    p = command("bench", "A/B-measure 1bit serve configs (the first is the baseline), interleaved round by round on fresh servers")
    p.add_argument("-m", "--model", required=True, help="the model every config serves")
    p.add_argument("--config", action="append", default=[], metavar="NAME=ARGS", help='1bit serve arguments of one config, the first the baseline: --config base= --config dflash="--dflash D.gguf"')
    p.add_argument("--llama-server", help="this llama-server (default: the current build of --profile)")
    _profile(p, "whose build's llama-server runs when --llama-server is not given")
    p.add_argument("--device", choices=DEVICES, help="serve's --device (default: the profile's; auto with --llama-server)")
    p.add_argument("--protocol", choices=BENCH_PROTOCOLS, default=BENCH_PROTOCOLS[0],
                   help="how each request asks: seeds (default: the engine's tools/bench.py, chat completions with thinking off) or completion (/completion of token ids, ignore_eos: models without a chat template)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=d.BENCH_ROUNDS, help=f"rounds, each running every config once (default {d.BENCH_ROUNDS})")
    p.add_argument("--prompt-reps", type=int, default=d.BENCH_PROMPT_REPS, help=f"long-prompt requests per run (default {d.BENCH_PROMPT_REPS})")
    p.add_argument("--decode-reps", type=int, default=d.BENCH_DECODE_REPS, help=f"requests per decode prompt per run (default {d.BENCH_DECODE_REPS})")
    p.add_argument("--decode-tokens", type=int, default=d.BENCH_DECODE_TOKENS, help=f"tokens generated per decode request (default {d.BENCH_DECODE_TOKENS})")
    p.add_argument("--prompt-tokens", type=int, help=f"tokens of the long prompt (default: 1838 with its chat template on seeds, {d.BENCH_PROMPT_TOKENS} on completion)")
    p.add_argument("--warmup-tokens", type=int, default=d.BENCH_WARMUP_TOKENS, help=f"an unmeasured decode of this many tokens on each fresh server first (default {d.BENCH_WARMUP_TOKENS}; 0: none)")
    p.add_argument("-c", "--ctx-size", type=int, default=d.BENCH_CONTEXT, help=f"every server's context (default {d.BENCH_CONTEXT})")
    lock = p.add_mutually_exclusive_group()
    lock.add_argument("--lock", metavar="PATH", help="hold this lock file for the whole run instead of the box lock: $ONEBIT_BOX_LOCK, else onebit-ci's cache folder's box.lock, the perf gate's")
    lock.add_argument("--no-lock", action="store_true", help="hold no lock: measure while the perf gate or another bench may be measuring")
    p.add_argument("--json", metavar="OUT", help="write the record (configs, every sample, the figures) here")
    p.add_argument("--logs", metavar="DIR", help="the servers' logs (default: build/bench/logs)")
    p.add_argument("--recipe", metavar="ID", help="re-measure a recipe: its launch with and without it, interleaved; prints a measured: line")
    p.add_argument("--args", metavar="ARGS", help="with --recipe: serve arguments both configs take (a drafter, a device)")
    p.add_argument("--recipes", metavar="FILE", help="with --recipe: the recipes file (default: serve's built-in recipes)")
    p.add_argument("--check", action="store_true", help="with --recipe: fail when the recipe's check no longer holds")
    return top
