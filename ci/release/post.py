"""A verdict where the maintainers look: a commit status per profile on the fork's commit and one pull-request comment
(the gate table, links to the run and the report) that later runs update in place, through GitHub's REST API.

The plan of the requests is pure (:func:`status_body`, :func:`comment_body`, :func:`merged`); :class:`GitHub` sends
them, with the token from ``GITHUB_TOKEN`` (else ``ONEBIT_GITHUB_TOKEN``), retrying a 5xx or a rate limit with
backoff; a 401, 403 or 404 is one line saying what to fix. ``--dry-run`` prints each request and sends nothing. The
token's scopes: docs/try.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import requests

from ci.errors import ConfigError, Refused

API = "https://api.github.com"
API_VAR = "ONEBIT_GITHUB_API"  # another API root: GitHub Enterprise Server's, or a test's server
TOKEN_VARS = ("GITHUB_TOKEN", "ONEBIT_GITHUB_TOKEN")
ACCEPT = "application/vnd.github+json"
API_VERSION = "2022-11-28"
ATTEMPTS = 5
BACKOFF = 2.0  # seconds before the second attempt, doubled each time after
LONGEST_WAIT = 120.0  # a rate limit asking for longer is an error: the job is not held for an hour
MARKER = "<!-- onebit-ci:try -->"
SECTION = "<!-- onebit-ci:try:{profile} -->"
SECTION_END = "<!-- /onebit-ci:try:{profile} -->"
CONTEXT = "onebit-ci/try ({profile})"
DESCRIPTION_LIMIT = 140  # GitHub's limit on a status's description
COMMENT_LIMIT = 65536  # and on a comment's body
REPO_RE = re.compile(r"^https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?$")

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_TOKEN = "--post: no token: set GITHUB_TOKEN (or ONEBIT_GITHUB_TOKEN) to a token with commit statuses: write and pull requests: write on {repo}"
NO_REPO = "--post: {url} is not a github.com repository; give --repo OWNER/NAME"
NOT_A_REPO = '--repo "{repo}": not OWNER/NAME'
UNAUTHORIZED = "GitHub answered 401 to {method} {path}: the token in {var} is missing, expired or wrong"
FORBIDDEN = "GitHub answered 403 to {method} {path}: the token in {var} lacks {scope} on {repo} ({said})"
NOT_FOUND = "GitHub answered 404 to {method} {path}: no {what} that the token in {var} can see (a fine-grained token must be given the repository {repo})"
GAVE_UP = "GitHub answered {status} to {method} {path} {attempts} times ({said}); try again later"
UNREACHABLE = "GitHub could not be reached for {method} {path} after {attempts} attempts ({error})"
WAIT_TOO_LONG = "GitHub's rate limit asks to wait {seconds:.0f} s for {method} {path}, more than {longest:.0f} s; post again after it resets"
RETRYING = "post: {method} {path}: {status}, again in {seconds:.1f} s ({attempt}/{attempts})"
DRY_RUN = "post: dry run: nothing is sent; the requests it would make:"
REQUEST = "{method} {url}"
FIND_COMMENT = "GET {url} (page by page, for the comment marked {marker})"
UPDATE_OR_CREATE = "PATCH {update} (the comment found), else POST {create}"
STATUS_SET = "post: status {context}: {state} on {sha} ({repo})"
COMMENT_UPDATED = "post: comment updated: {url}"
COMMENT_CREATED = "post: comment written: {url}"
NO_PR = "post: no pull request named (--pr, or REF as pull/N): the status only"
SCOPE_STATUSES = "commit statuses: write"
SCOPE_COMMENTS = "pull requests: write (or issues: write)"


@dataclass(frozen=True)
class GateLine:
    gate: str
    verdict: str
    seconds: float
    summary: str


@dataclass(frozen=True)
class Verdict:
    """One profile's verdict on one commit."""

    sha: str
    label: str
    profile: str
    build_key: str
    gates: tuple[GateLine, ...]
    build_seconds: float = 0.0
    incremental: bool = False
    counts: tuple[tuple[str, int, int | None], ...] = ()  # (op, pins.yaml's, the commit's): shown where they differ
    pr: int | None = None
    up_to_date: bool = False  # the build was there already: build_seconds are the compile's of an earlier run

    @property
    def failed(self) -> tuple[GateLine, ...]:
        return tuple(g for g in self.gates if g.verdict != "passed")

    @property
    def state(self) -> str:
        if not self.gates or any(g.verdict == "error" for g in self.gates):
            return "error"
        return "failure" if self.failed else "success"

    def description(self) -> str:
        if not self.gates:
            return "no gate ran"
        n = len(self.gates)
        if not self.failed:
            text = f"all {n} gates passed" if n > 1 else f"the one gate run ({self.gates[0].gate}) passed"
        else:
            text = f"{len(self.failed)} of {n} gates did not pass: " + ", ".join(f"{g.gate} {g.verdict}" for g in self.failed)
        return _cut(text, DESCRIPTION_LIMIT)


@dataclass(frozen=True)
class PostRequest:
    repo: str  # OWNER/NAME of the fork
    pr: int | None = None
    run_url: str = ""
    report_url: str = ""
    dry_run: bool = False
    api: str = API


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def repo_of(url: str) -> str | None:
    """OWNER/NAME of a github.com https URL, else None."""
    m = REPO_RE.match(url)
    return f"{m.group(1)}/{m.group(2)}" if m else None


def run_url_of(env: Mapping[str, str]) -> str:
    """This GitHub Actions run's page, from the variables the runner sets; "" elsewhere."""
    server, repo, run_id = env.get("GITHUB_SERVER_URL", ""), env.get("GITHUB_REPOSITORY", ""), env.get("GITHUB_RUN_ID", "")
    return f"{server}/{repo}/actions/runs/{run_id}" if server and repo and run_id else ""


def request_of(args: argparse.Namespace, fork_url: str) -> PostRequest:
    """``--post`` and its flags: the repository (``--repo``, else the fork's URL), the pull request, the links."""
    repo = args.repo or repo_of(args.url or fork_url)
    if repo is None:
        raise ConfigError(NO_REPO.format(url=args.url or fork_url))
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise ConfigError(NOT_A_REPO.format(repo=repo))
    api = args.api or os.environ.get(API_VAR) or API
    return PostRequest(repo, args.pr, args.run_url or run_url_of(os.environ), args.report_url or "", args.dry_run, api.rstrip("/"))


# -- what is sent (pure) ---------------------------------------------------------------------------------------------


def status_body(verdict: Verdict, request: PostRequest) -> dict[str, str]:
    body = {"state": verdict.state, "context": CONTEXT.format(profile=verdict.profile), "description": verdict.description()}
    target = request.run_url or request.report_url
    if target:
        body["target_url"] = target
    return body


def _row(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def section(verdict: Verdict, request: PostRequest) -> str:
    """This profile's part of the comment, between its markers."""
    head = "**passed**" if verdict.state == "success" else f"**{verdict.state.upper()}**"
    lines = [
        SECTION.format(profile=verdict.profile),
        f"#### {verdict.profile}: `{verdict.sha[:7]}` ({verdict.label}): {head}, {verdict.description()}",
        "",
        "| gate | verdict | seconds | summary |",
        "| --- | --- | --- | --- |",
    ]
    for g in verdict.gates:
        shown = g.verdict if g.verdict == "passed" else f"**{g.verdict.upper()}**"
        lines.append(f"| {g.gate} | {shown} | {g.seconds:.1f} | {_cut(_row(g.summary), 300)} |")
    how = "up to date, compiled earlier" if verdict.up_to_date else "from the pin's build" if verdict.incremental else "fresh"
    links = [f"compiled in {verdict.build_seconds:.1f} s ({how})", f"build key `{verdict.build_key[:12]}`"]
    if request.run_url:
        links.append(f"[the run]({request.run_url})")
    if request.report_url:
        links.append(f"[the report]({request.report_url})")
    lines += ["", " · ".join(links)]
    for op, said, listed in verdict.counts:
        if listed is not None and listed != said:
            lines.append(f"\ntest-backend-ops `{op}`: pins.yaml says {said}, this commit lists {listed}")
    lines.append(SECTION_END.format(profile=verdict.profile))
    return "\n".join(lines)


def comment_body(verdict: Verdict, request: PostRequest) -> str:
    """The comment as first written: the marker, a heading, this profile's section."""
    return merged(None, verdict, request)


def merged(existing: str | None, verdict: Verdict, request: PostRequest) -> str:
    """``existing`` with this profile's section replaced (or added), every other profile's kept: one comment for
    the pull request, whatever the runs and profiles."""
    mine = section(verdict, request)
    if existing is None or MARKER not in existing:
        body = f"{MARKER}\n### onebit-ci: this pull request's commits, built and gated\n\n{mine}\n"
        return _cut(body, COMMENT_LIMIT)
    start, end = SECTION.format(profile=verdict.profile), SECTION_END.format(profile=verdict.profile)
    if start in existing and end in existing[existing.index(start) :]:
        a = existing.index(start)
        b = existing.index(end, a) + len(end)
        return _cut(existing[:a] + mine + existing[b:], COMMENT_LIMIT)
    return _cut(existing.rstrip("\n") + "\n\n" + mine + "\n", COMMENT_LIMIT)


# -- sending it ------------------------------------------------------------------------------------------------------


def token_of(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(the variable, the token) from the environment, or None."""
    for var in TOKEN_VARS:
        if env.get(var):
            return var, env[var]
    return None


class GitHub:
    """GitHub's REST API with retries: 5xx, 429 and secondary rate limits are tried again (``attempts`` in all),
    waiting what the answer asks (``Retry-After``, ``x-ratelimit-reset``) or backing off; 401, 403 and 404 are one
    line each."""

    def __init__(
        self, token: str, var: str, repo: str, api: str = API, *, attempts: int = ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time, say: Callable[[str], None] | None = None,
    ) -> None:  # fmt: skip
        self.var, self.repo, self.api = var, repo, api.rstrip("/")
        self.attempts, self.sleep, self.clock, self.say = attempts, sleep, clock, say
        self.session = requests.Session()
        self.session.headers.update({"Authorization": f"Bearer {token}", "Accept": ACCEPT, "X-GitHub-Api-Version": API_VERSION, "User-Agent": "onebit-ci"})

    def close(self) -> None:
        self.session.close()

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None, *, scope: str = "", what: str = "") -> Any:
        """The answer's JSON; a Refused naming what to fix when GitHub will not, after the retries it allows."""
        url = self.api + path
        said = ""
        status: int | str = ""
        for attempt in range(1, self.attempts + 1):
            try:
                answer = self.session.request(method, url, json=body, timeout=30)
            except (requests.ConnectionError, requests.Timeout) as exc:
                if attempt == self.attempts:
                    raise Refused(UNREACHABLE.format(method=method, path=path, attempts=self.attempts, error=type(exc).__name__)) from None
                self._wait(BACKOFF * 2 ** (attempt - 1), method, path, type(exc).__name__, attempt)
                continue
            status = answer.status_code
            said = _message(answer)
            if status < 300:
                return answer.json() if answer.content else None
            wait = self._rate_limited(answer)
            if wait is None and status < 500:
                raise Refused(self._refusal(answer, method, path, scope, what))
            if attempt == self.attempts:
                break
            self._wait(wait if wait is not None else BACKOFF * 2 ** (attempt - 1), method, path, str(status), attempt)
        raise Refused(GAVE_UP.format(status=status, method=method, path=path, attempts=self.attempts, said=said or "no message"))

    def _rate_limited(self, answer: requests.Response) -> float | None:
        """Seconds to wait before asking again, when ``answer`` is a rate limit (429, or a 403 that says so)."""
        headers = answer.headers
        limited = answer.status_code == 429 or (
            answer.status_code == 403 and ("retry-after" in headers or headers.get("x-ratelimit-remaining") == "0" or "rate limit" in _message(answer).lower())
        )
        if not limited:
            return None
        if headers.get("retry-after", "").strip().isdigit():
            return float(headers["retry-after"])
        reset = headers.get("x-ratelimit-reset", "")
        if reset.strip().isdigit():
            return max(0.0, float(reset) - self.clock()) + 1.0
        return 60.0  # GitHub's advice for a secondary limit that names no time

    def _wait(self, seconds: float, method: str, path: str, status: str, attempt: int) -> None:
        if seconds > LONGEST_WAIT:
            raise Refused(WAIT_TOO_LONG.format(seconds=seconds, method=method, path=path, longest=LONGEST_WAIT))
        if self.say is not None:
            self.say(RETRYING.format(method=method, path=path, status=status, seconds=seconds, attempt=attempt, attempts=self.attempts))
        self.sleep(seconds)

    def _refusal(self, answer: requests.Response, method: str, path: str, scope: str, what: str) -> str:
        if answer.status_code == 401:
            return UNAUTHORIZED.format(method=method, path=path, var=self.var)
        if answer.status_code == 403:
            return FORBIDDEN.format(method=method, path=path, var=self.var, scope=scope or "the scope it needs", repo=self.repo, said=_message(answer) or "no message")
        if answer.status_code == 404:
            return NOT_FOUND.format(method=method, path=path, what=what or "such thing", var=self.var, repo=self.repo)
        return f"GitHub answered {answer.status_code} to {method} {path}: {_message(answer) or 'no message'}"


def _message(answer: requests.Response) -> str:
    try:
        data = answer.json()
    except ValueError:
        return answer.text[:200].strip()
    return str(data.get("message", ""))[:200] if isinstance(data, dict) else ""


def find_comment(github: GitHub, repo: str, pr: int) -> dict[str, Any] | None:
    """The pull request's comment marked :data:`MARKER` (the first), page by page."""
    page = 1
    while True:
        found = github.request("GET", f"/repos/{repo}/issues/{pr}/comments?per_page=100&page={page}", scope=SCOPE_COMMENTS, what=f"pull request {pr} in {repo}")
        if not isinstance(found, list) or not found:
            return None
        for comment in found:
            if isinstance(comment, dict) and MARKER in str(comment.get("body", "")):
                return comment
        if len(found) < 100:
            return None
        page += 1


def post_verdict(verdict: Verdict, request: PostRequest, say: Callable[[str], None], env: Mapping[str, str] | None = None, github: GitHub | None = None) -> None:
    """Set the status, then write or update the comment; with ``dry_run``, print the requests instead."""
    pr = request.pr if request.pr is not None else verdict.pr
    repo = request.repo
    status_path = f"/repos/{repo}/statuses/{verdict.sha}"
    if request.dry_run:
        say(DRY_RUN)
        say(REQUEST.format(method="POST", url=request.api + status_path))
        say(json.dumps(status_body(verdict, request), indent=1))
        if pr is None:
            say(NO_PR)
            return
        say(FIND_COMMENT.format(url=f"{request.api}/repos/{repo}/issues/{pr}/comments?per_page=100&page=1", marker=MARKER))
        say(UPDATE_OR_CREATE.format(update=f"{request.api}/repos/{repo}/issues/comments/ID", create=f"{request.api}/repos/{repo}/issues/{pr}/comments"))
        say(json.dumps({"body": comment_body(verdict, request)}, indent=1))
        return
    if github is None:
        found = token_of(os.environ if env is None else env)
        if found is None:
            raise ConfigError(NO_TOKEN.format(repo=repo))
        github = GitHub(found[1], found[0], repo, request.api, say=say)
    try:
        body = status_body(verdict, request)
        github.request("POST", status_path, body, scope=SCOPE_STATUSES, what=f"commit {verdict.sha[:12]} in {repo}")
        say(STATUS_SET.format(context=body["context"], state=body["state"], sha=verdict.sha[:7], repo=repo))
        if pr is None:
            say(NO_PR)
            return
        comment = find_comment(github, repo, pr)
        if comment is not None:
            updated = github.request(
                "PATCH", f"/repos/{repo}/issues/comments/{comment['id']}", {"body": merged(str(comment.get("body", "")), verdict, request)},
                scope=SCOPE_COMMENTS, what=f"comment {comment['id']} in {repo}",
            )  # fmt: skip
            say(COMMENT_UPDATED.format(url=(updated or {}).get("html_url", comment.get("html_url", ""))))
        else:
            made = github.request("POST", f"/repos/{repo}/issues/{pr}/comments", {"body": comment_body(verdict, request)}, scope=SCOPE_COMMENTS, what=f"pull request {pr} in {repo}")
            say(COMMENT_CREATED.format(url=(made or {}).get("html_url", "")))
    finally:
        github.close()
