"""The command line takes a flag only as it is spelled: a typo is refused with the closest flag named, before any
work starts (``--profil cpu`` was taken as ``--profile cpu`` and a 25-minute compile began)."""

from __future__ import annotations

import pytest

from ci import parser as parser_mod
from ci.cli import COMMANDS, main


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "typo", "meant"),
    [
        (("build", "--profil", "cpu"), "--profil", "--profile"),
        (("patches", "--chek"), "--chek", "--check"),
        (("bump-pin", "head", "--allow-rolback"), "--allow-rolback", "--allow-rollback"),
        (("gpu-tests", "--gate=perf", "--round", "4"), "--round", "--rounds"),
    ],
)
def test_a_misspelt_flag_is_refused_with_the_flag_meant(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], typo: str, meant: str) -> None:
    err = usage_error(capsys, *argv)
    assert parser_mod.UNKNOWN_ARGUMENT.format(argument=typo, suggestion=parser_mod.DID_YOU_MEAN.format(choice=meant)) in err
    assert f"usage: onebit-ci {argv[0]}" in err  # the usage of the command that was typed, not the top level's


def test_a_flag_with_nothing_close_is_refused_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(capsys, "verify-pin", "--zzzzzz")
    assert parser_mod.UNKNOWN_ARGUMENT.format(argument="--zzzzzz", suggestion="") in err


def test_a_misspelt_command_names_the_command_meant(capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(capsys, "biuld")
    assert parser_mod.DID_YOU_MEAN.format(choice="build") in err


def test_no_parser_takes_a_prefix_of_a_flag() -> None:
    top = parser_mod.parser({name: (lambda args: 0) for name in COMMANDS})
    parsers = [top, *next(a for a in top._actions if a.choices and isinstance(a.choices, dict)).choices.values()]  # type: ignore[union-attr]
    assert all(not p.allow_abbrev for p in parsers)
