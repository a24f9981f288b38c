"""The helpers the tests match messages with: a template with some fields known, others any text on one line."""

from __future__ import annotations

from tests.support.messages import partly, pattern, said


def test_said_fills_what_it_knows_and_matches_the_rest_within_a_line() -> None:
    template = "{leg} server: POST {path} got no answer in {seconds:g} s"
    assert said(template, "x\nnear server: POST /completion got no answer in 120 s\n", leg="near", seconds=120.0)
    assert not said(template, "near server: POST /completion got no answer in 120 s", leg="dflash")
    assert not pattern(template, leg="near").search("near server: POST\n/completion got no answer in 1 s")


def test_partly_keeps_unfilled_fields_with_their_specs_and_nests_templates() -> None:
    figure = "{check} = {median:.3f} against the floor {floor:g}"
    assert partly(figure, floor=3.5) == "{check} = {median:.3f} against the floor 3.5"
    about_one = partly(figure, median="1.0{median}")  # a template as a value: its own field stays
    assert said(about_one, "tps = 1.042 against the floor 3.5", check="tps", floor=3.5)
    assert not said(about_one, "tps = 2.042 against the floor 3.5", check="tps")


def test_partly_keeps_literal_braces_literal() -> None:
    template = '{value} is not an object; expected {{"about": ...}}'
    kept = partly(template, value="[1]")
    assert kept == '[1] is not an object; expected {{"about": ...}}'
    assert said(kept, '[1] is not an object; expected {"about": ...}')
    assert partly("{path}: bad", path="a{b.yaml") == "a{{b.yaml: bad"  # a lone brace is text, not a template
