"""A fork to bisect for real: 60 real commits of a mirror's branch with one fault commit planted among them.

    ONEBIT_FORK_MIRROR=PATH python benchmarks/bisect_branch.py --out build/bisect-h200 [--fault vulkan-gdn-decay]

Writes ``OUT/fork.git`` (a bare repository with the mirror's branches, its objects borrowed from the mirror) with a branch ``bisect/planted``: the range GOOD..BAD holds the
mirror's own 60 commits (merges and side branches as they are) plus one commit F that plants a fault of
ci/gates/selftest/faults.yaml after the commit AT; every commit descending from AT is rewritten to carry the fault (its tree
with the fault's search replaced, its parents mapped, its author, committer, dates and message kept), the others
stay as they are. Nothing depends on the clock or the machine, so the same mirror gives the same shas: the first
bad commit bisect must name is F. ``OUT/bisect-branch.json`` records GOOD, BAD, F and the command to run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, at_least_one, mirror_from_env, run_main

sys.path.insert(0, str(ROOT))
from ci.gates.selftest.run import load_faults

BRANCH = "bisect/planted"
IDENT = "onebit-ci bisect benchmark <bisect@example.invalid>"


def git(repo: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "--git-dir", str(repo), *args], input=stdin, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    if done.returncode != 0:
        sys.exit(f"bisect_branch: git {' '.join(args[:3])} failed: {done.stderr.strip()}")
    return done.stdout


def range_of(repo: Path, branch: str, commits: int) -> tuple[str, str]:
    """(GOOD, TIP) on ``branch``'s first-parent line with exactly ``commits`` commits in GOOD..TIP, TIP nearest the tip."""
    line = git(repo, "rev-list", "--first-parent", branch).split()
    for t, tip in enumerate(line):
        for good in line[t + 1 :]:
            n = int(git(repo, "rev-list", "--count", f"{good}..{tip}"))
            if n == commits:
                return good, tip
            if n > commits:
                break
    sys.exit(f"bisect_branch: no first-parent pair of {branch} has exactly {commits} commits between them")


def faulted_tree(repo: Path, commit: str, path: str, search: str, replace: str, scratch: Path) -> str:
    text = git(repo, "cat-file", "-p", f"{commit}:{path}")
    if text.count(search) != 1:
        sys.exit(
            f"bisect_branch: {commit[:7]}:{path} has {text.count(search)} matches for the fault's search (needs 1); pick another --fault or --at"
        )
    mode = git(repo, "ls-tree", commit, "--", path).split()[0]
    blob = git(repo, "hash-object", "-w", "--stdin", stdin=text.replace(search, replace)).strip()
    env = {"GIT_INDEX_FILE": str(scratch / "index")}
    git(repo, "read-tree", commit, env=env)
    git(repo, "update-index", "--cacheinfo", f"{mode},{blob},{path}", env=env)
    return git(repo, "write-tree", env=env).strip()


def rewrite(raw: str, tree: str, parents: list[str]) -> str:
    """A commit object's text with another tree and parents; a signature is dropped (it would no longer verify)."""
    head, _, message = raw.partition("\n\n")
    kept, in_sig = [], False
    for line in head.splitlines():
        if in_sig and line.startswith(" "):
            continue
        in_sig = line.startswith("gpgsig")
        if in_sig or line.startswith(("tree ", "parent ")):
            continue
        kept.append(line)
    return "\n".join([f"tree {tree}", *(f"parent {p}" for p in parents), *kept]) + "\n\n" + message


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="where fork.git and bisect-branch.json go")
    ap.add_argument("--branch", default="main", help="the mirror's branch the commits come from (default main)")
    ap.add_argument("--commits", type=at_least_one, default=60, help="real commits in the range (default 60)")
    ap.add_argument("--fault", default="vulkan-gdn-decay", help="the fault of ci/gates/selftest/faults.yaml to plant (default vulkan-gdn-decay)")
    ap.add_argument("--at", type=at_least_one, default=23, help="plant it after the AT-th commit of the range, oldest first (default 23)")
    args = ap.parse_args()
    mirror = mirror_from_env()
    fault = next((f for f in load_faults() if f.id == args.fault), None)
    if fault is None:
        sys.exit(f"bisect_branch: --fault {args.fault}: not in ci/gates/selftest/faults.yaml")
    fork = args.out / "fork.git"
    shutil.rmtree(fork, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    # the mirror's objects through alternates, not a clone: a mirror may lack a few large blobs (models/, docs/, which
    # a checkout omits), and a clone refuses to copy an incomplete repository
    subprocess.run(["git", "init", "-q", "--bare", str(fork)], check=True)
    mirror_git = Path(git(mirror, "rev-parse", "--absolute-git-dir").strip())
    (fork / "objects" / "info" / "alternates").write_text(f"{mirror_git / 'objects'}\n")
    for line in git(mirror, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/").splitlines():
        sha, ref = line.split()
        git(fork, "update-ref", ref, sha)
    git(fork, "symbolic-ref", "HEAD", f"refs/heads/{args.branch}")
    good, tip = range_of(fork, args.branch, args.commits)
    order = git(fork, "rev-list", "--reverse", "--topo-order", f"{good}..{tip}").split()
    if not 1 <= args.at < len(order):
        sys.exit(f"bisect_branch: --at {args.at}: must be 1..{len(order) - 1}")
    at = order[args.at - 1]
    mapped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="onebit-bisect-branch-") as tmp:
        scratch = Path(tmp)
        date = git(fork, "show", "-s", "--format=%ct", at).strip()
        message = (
            f"ggml: planted fault {fault.id}\n\n{fault.why}\n\nPlanted by benchmarks/bisect_branch.py (ci/gates/selftest/faults.yaml {fault.id}).\n"
        )
        planted = f"tree {faulted_tree(fork, at, fault.file, fault.search, fault.replace, scratch)}\nparent {at}\n"
        planted += f"author {IDENT} {int(date) + 60} +0000\ncommitter {IDENT} {int(date) + 60} +0000\n\n{message}"
        first_bad = git(fork, "hash-object", "-t", "commit", "-w", "--stdin", stdin=planted).strip()
        mapped[at] = first_bad
        for commit in order:
            if commit == at or git(fork, "rev-list", "--count", f"{at}..{commit}").strip() == "0":
                continue  # not a descendant of AT: stays as it is
            raw = git(fork, "cat-file", "commit", commit)
            parents = [mapped.get(p, p) for p in git(fork, "show", "-s", "--format=%P", commit).split()]
            tree = faulted_tree(fork, commit, fault.file, fault.search, fault.replace, scratch)
            mapped[commit] = git(fork, "hash-object", "-t", "commit", "-w", "--stdin", stdin=rewrite(raw, tree, parents)).strip()
    bad = mapped.get(tip, tip)
    git(fork, "update-ref", f"refs/heads/{BRANCH}", bad)
    n = int(git(fork, "rev-list", "--count", f"{good}..{bad}"))
    record = {
        "good": good,
        "bad": bad,
        "first_bad": first_bad,
        "planted_after": at,
        "fault": fault.id,
        "commits_in_range": n,
        "rewritten": len(mapped) - 1,
        "branch": BRANCH,
        "command": f"nox --no-venv -s bisect -- --profile vulkan --good {good} --bad {bad} --gate {fault.gate} --remote {fork} --check-good",
    }
    (args.out / "bisect-branch.json").write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"bisect_branch: {fork}: branch {BRANCH}, {n} commits in {good[:7]}..{bad[:7]} ({args.commits} real + the fault), {len(mapped) - 1} rewritten"
    )
    print(f"bisect_branch: the first bad commit is {first_bad} (fault {fault.id} after {at[:7]})")
    print(f"GOOD={good} BAD={bad} FIRST_BAD={first_bad}")


if __name__ == "__main__":
    run_main(main)
