"""Posting a verdict: the real client (requests) against a real HTTP server holding GitHub's shapes and failures."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from ci.errors import ConfigError, Refused
from ci.release import post
from tests.support.github import TOKEN, FakeGitHub, fake_github
from tests.support.messages import said

REPO = "someone/ROCmFPX"
SHA = "c14872f8407f5b0642f3c395439b929021df753a"


def verdict(profile: str = "cpu", failed: bool = False, pr: int | None = 7) -> post.Verdict:
    gates = (
        post.GateLine("route", "passed", 4.0, "PASSED: 160 tests"),
        post.GateLine("backend_ops", "failed" if failed else "passed", 2.6, "FAILED on CPU: GATED_DELTA_NET: 54 expected, 36 ran" if failed else "PASSED"),
    )
    return post.Verdict(SHA, "pull/7", profile, "a" * 64, gates, 612.3, False, (("GATED_DELTA_NET", 54, 36),), pr)


def request(github: FakeGitHub, **kwargs: object) -> post.PostRequest:
    return post.PostRequest(REPO, api=github.api, run_url="https://github.com/me/onebit-ci/actions/runs/1", report_url="https://me.github.io/onebit-ci/", **kwargs)  # type: ignore[arg-type]


class Waits(list[float]):
    """The client's sleeps, recorded instead of slept: the tests judge what it waited, never how long a test took."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with fake_github(REPO) as served:
        yield served


def client(github: FakeGitHub, waits: Waits | None = None, token: str = TOKEN, clock: float = 1_000_000.0) -> post.GitHub:
    return post.GitHub(token, "GITHUB_TOKEN", REPO, github.api, sleep=waits if waits is not None else Waits(), clock=lambda: clock)


def send(github: FakeGitHub, v: post.Verdict, gh: post.GitHub | None = None) -> list[str]:
    lines: list[str] = []
    post.post_verdict(v, request(github), lines.append, github=gh or client(github))
    return lines


def test_the_status_and_the_comment_have_githubs_shapes(github: FakeGitHub) -> None:
    lines = send(github, verdict(failed=True))
    (status,) = github.statuses[(REPO, SHA)]
    assert status == {
        "state": "failure", "context": "onebit-ci/try (cpu)", "description": "1 of 2 gates did not pass: backend_ops failed",
        "target_url": "https://github.com/me/onebit-ci/actions/runs/1",
    }  # fmt: skip
    (comment,) = github.comments[(REPO, 7)]
    assert comment["body"].startswith(post.MARKER)
    assert "| backend_ops | **FAILED** | 2.6 |" in comment["body"]
    assert "[the run](https://github.com/me/onebit-ci/actions/runs/1)" in comment["body"]
    assert "[the report](https://me.github.io/onebit-ci/)" in comment["body"]
    assert "pins.yaml says 54, this commit lists 36" in comment["body"]
    for seen in github.requests:
        assert seen.headers["authorization"] == f"Bearer {TOKEN}"
        assert seen.headers["accept"] == "application/vnd.github+json"
        assert seen.headers["x-github-api-version"] == post.API_VERSION
    assert [(s.method, s.path.split("?")[0]) for s in github.requests] == [
        ("POST", f"/repos/{REPO}/statuses/{SHA}"),
        ("GET", f"/repos/{REPO}/issues/7/comments"),
        ("POST", f"/repos/{REPO}/issues/7/comments"),
    ]
    assert post.COMMENT_CREATED.format(url=comment["html_url"]) in lines


def test_later_runs_update_the_one_comment_in_place(github: FakeGitHub) -> None:
    for n in range(120):  # the comment is found past the first page
        github.add_comment(REPO, 7, f"a review comment {n}")
    send(github, verdict("cpu", failed=True))
    send(github, verdict("vulkan"))
    send(github, verdict("cpu"))  # the cpu verdict again: its part replaced, not added
    ours = [c for c in github.comments[(REPO, 7)] if post.MARKER in c["body"]]
    assert len(ours) == 1
    body = ours[0]["body"]
    assert body.count(post.SECTION.format(profile="cpu")) == 1
    assert body.count(post.SECTION.format(profile="vulkan")) == 1
    assert "**FAILED**" not in body
    assert [s.method for s in github.requests if "/issues/comments/" in s.path] == ["PATCH", "PATCH"]
    assert len(github.comments[(REPO, 7)]) == 121
    assert [s["state"] for s in github.statuses[(REPO, SHA)]] == ["failure", "success", "success"]


def test_5xx_answers_are_tried_again_with_backoff(github: FakeGitHub) -> None:
    github.fail("POST", rf"/repos/{REPO}/statuses/.*", 502, message="Bad Gateway")
    github.fail("POST", rf"/repos/{REPO}/statuses/.*", 503)
    waits = Waits()
    send(github, verdict(), client(github, waits))
    assert waits == [post.BACKOFF, 2 * post.BACKOFF]
    assert len(github.statuses[(REPO, SHA)]) == 1


def test_429_waits_what_retry_after_asks(github: FakeGitHub) -> None:
    github.fail("GET", r".*/comments", 429, {"Retry-After": "7"}, "API rate limit exceeded")
    waits = Waits()
    send(github, verdict(), client(github, waits))
    assert waits == [7.0]
    assert len(github.comments[(REPO, 7)]) == 1


def test_a_secondary_rate_limit_waits_until_its_reset(github: FakeGitHub) -> None:
    reset = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(1_000_000 + 20)}
    github.fail("POST", r".*/comments", 403, reset, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.")
    waits = Waits()
    send(github, verdict(), client(github, waits, clock=1_000_000.0))
    assert waits == [21.0]
    assert len(github.comments[(REPO, 7)]) == 1


def test_a_rate_limit_too_long_to_wait_is_one_line(github: FakeGitHub) -> None:
    github.fail("POST", r".*/statuses/.*", 429, {"Retry-After": "3600"})
    with pytest.raises(Refused) as caught:
        send(github, verdict())
    assert caught.value.message == post.WAIT_TOO_LONG.format(seconds=3600, method="POST", path=f"/repos/{REPO}/statuses/{SHA}", longest=post.LONGEST_WAIT)


def test_an_api_that_keeps_failing_is_given_up_in_one_line(github: FakeGitHub) -> None:
    for _ in range(post.ATTEMPTS):
        github.fail("POST", r".*/statuses/.*", 500, message="Server Error")
    waits = Waits()
    with pytest.raises(Refused) as caught:
        send(github, verdict(), client(github, waits))
    assert caught.value.message == post.GAVE_UP.format(status=500, method="POST", path=f"/repos/{REPO}/statuses/{SHA}", attempts=post.ATTEMPTS, said="Server Error")
    assert len(waits) == post.ATTEMPTS - 1


def test_401_403_and_404_each_say_what_to_fix(github: FakeGitHub) -> None:
    with pytest.raises(Refused) as caught:
        send(github, verdict(), client(github, token="expired"))
    assert caught.value.message == post.UNAUTHORIZED.format(method="POST", path=f"/repos/{REPO}/statuses/{SHA}", var="GITHUB_TOKEN")
    github.fail("POST", r".*/statuses/.*", 403, message="Resource not accessible by personal access token")
    with pytest.raises(Refused) as caught:
        send(github, verdict())
    assert said(post.FORBIDDEN, caught.value.message, scope=post.SCOPE_STATUSES, repo=REPO, said="Resource not accessible by personal access token")
    github.fail("GET", r".*/comments", 404, message="Not Found")
    with pytest.raises(Refused) as caught:
        send(github, verdict())
    assert said(post.NOT_FOUND, caught.value.message, what=f"pull request 7 in {REPO}", var="GITHUB_TOKEN", repo=REPO)
    assert "\n" not in caught.value.message


def test_an_unreachable_api_is_tried_again_then_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    waits = Waits()
    gh = post.GitHub(TOKEN, "GITHUB_TOKEN", REPO, f"http://127.0.0.1:{port}", sleep=waits)
    with pytest.raises(Refused) as caught:
        post.post_verdict(verdict(), post.PostRequest(REPO, api=f"http://127.0.0.1:{port}"), lambda _: None, github=gh)
    assert said(post.UNREACHABLE, caught.value.message, attempts=post.ATTEMPTS)
    assert len(waits) == post.ATTEMPTS - 1


def test_without_a_token_it_says_which_variable_and_scopes(github: FakeGitHub) -> None:
    with pytest.raises(ConfigError) as caught:
        post.post_verdict(verdict(), request(github), lambda _: None, env={})
    assert caught.value.message == post.NO_TOKEN.format(repo=REPO)
    assert github.requests == []


def test_the_token_comes_from_the_environment(github: FakeGitHub) -> None:
    post.post_verdict(verdict(), request(github), lambda _: None, env={"ONEBIT_GITHUB_TOKEN": TOKEN})
    assert len(github.statuses[(REPO, SHA)]) == 1


def test_a_dry_run_prints_every_request_and_sends_nothing(github: FakeGitHub) -> None:
    lines: list[str] = []
    post.post_verdict(verdict(), request(github, dry_run=True), lines.append, env={})
    text = "\n".join(lines)
    assert post.REQUEST.format(method="POST", url=f"{github.api}/repos/{REPO}/statuses/{SHA}") in lines
    assert '"context": "onebit-ci/try (cpu)"' in text
    assert f"{github.api}/repos/{REPO}/issues/7/comments" in text
    assert post.UPDATE_OR_CREATE.format(update=f"{github.api}/repos/{REPO}/issues/comments/ID", create=f"{github.api}/repos/{REPO}/issues/7/comments") in lines
    assert github.requests == []


@pytest.mark.parametrize(
    ("url", "repo"),
    [
        ("https://github.com/ciru-ai/ROCmFPX", "ciru-ai/ROCmFPX"),
        ("https://github.com/1bit-MONSTER/ROCmFPX.git", "1bit-MONSTER/ROCmFPX"),
        ("https://gitlab.com/x/y", None),
    ],
)
def test_the_repository_comes_from_the_forks_url(url: str, repo: str | None) -> None:
    assert post.repo_of(url) == repo


def test_the_run_link_is_this_actions_runs() -> None:
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "me/onebit-ci", "GITHUB_RUN_ID": "42"}
    assert post.run_url_of(env) == "https://github.com/me/onebit-ci/actions/runs/42"
    assert post.run_url_of({}) == ""
