"""The self-test's faults (faults.yaml): what each plants where, which gate must catch it and which older gates it
gets past; their digest (what a self-test record is bound to) and whether each still applies at a commit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ci.errors import ConfigError
from ci.gates.results import Status
from ci.git import Git
from ci.places import id_problem, relative_problem
from ci.schema import Section, parse_yaml
from serve.bounded import CONFIG_LIMIT, read_text


@dataclass(frozen=True)
class KnownGates:
    """The gate names a fault may give (the registry's, passed in: the registry lists the self-test's own gate)."""

    plantable: tuple[str, ...]  # a fault's gate and missed_by
    always: tuple[str, ...]  # what "all" names


FAULTS = "faults.yaml"
ALL = "all"

# Messages, shared with the tests that match on them (tests/support/messages.py)
FAULTS_UNREADABLE = "--faults {path}: cannot be read: {reason}"
NOT_A_GATE = '"{gate}" is not a gate: {known}'
NOT_A_FAULT_ID = '"{id}" is not a fault id ({why})'
NOT_ANOTHER_GATE = '"{gate}" is not another gate: {known}'
ID_TWICE = 'the id "{id}" is given twice'
NOT_A_FLAG = "is not true or false"
NOT_JUDGED = "not judged: {blocked}; make it pass first"  # each blocking gate a BLOCKED_BY, joined by "; "
BLOCKED_BY = "{gate} fails the unplanted build ({record})"
STALE_MISSING = "stale fault: {file} does not exist at the pin"
STALE_NO_MATCH = "stale fault: {file} has no match for {anchor!r}"
STALE_MATCHES = "stale fault: {file} has {count} matches for {anchor!r}; make the search unique"
STALE_LINE = "{fault}: {why}"  # bump_pin's report line of a stale fault (stale_lines), why a STALE_*


@dataclass(frozen=True)
class Fault:
    id: str
    file: str
    search: str
    replace: str
    gate: str  # the gate that must catch it, or "all": every gate must pass
    expect: Status  # FAILED (caught) or PASSED (benign)
    profiles: tuple[str, ...]
    why: str
    missed_by: tuple[str, ...] = ()  # the older checks it gets past: each must pass with the fault planted
    fixes: bool = False  # the edit is a fix the pin lacks: its gate fails the unplanted build and must pass the planted one

    every: tuple[str, ...] = ()  # what "all" names: the gates ship requires for every build (the registry's)

    @property
    def gates(self) -> tuple[str, ...]:
        return self.every if self.gate == ALL else (self.gate, *self.missed_by)

    def wanted(self, gate: str) -> Status:
        """The verdict ``gate`` must give with this fault planted."""
        return Status.PASSED if gate in self.missed_by else self.expect

    def anchor(self) -> str:
        first = self.search.strip().splitlines()[0].strip() if self.search.strip() else self.search
        return first if len(first) <= 80 else first[:77] + "..."


def load_faults(path: Path | None = None, gates: KnownGates | None = None) -> tuple[Fault, ...]:
    """faults.yaml (default: the committed ci/gates/selftest/faults.yaml), strictly; each gate it names one of ``gates``
    (the registry's, which :func:`ci.gates.selftest.run.load_faults` passes; None: the names are not checked, for a
    digest of the file's content)."""
    if path is None:
        text, name = resources.files("ci.gates.selftest").joinpath(FAULTS).read_text(encoding="utf-8"), f"ci/gates/selftest/{FAULTS}"
    else:
        try:  # the user's file itself, never what a link points at
            text, name = read_text(path, CONFIG_LIMIT, follow=False), str(path)
        except OSError as exc:
            raise ConfigError(FAULTS_UNREADABLE.format(path=path, reason=exc.strerror)) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"--faults {path}: not UTF-8 text ({exc.reason})") from None
    top = Section(name, "", parse_yaml(text, name) or {})
    raw = top._get("faults", True)
    if not isinstance(raw, list) or not raw:
        raise top.error("is not a list of faults", "faults")
    faults: list[Fault] = []
    for i, item in enumerate(raw):
        s = Section(name, f"faults[{i}]", item)
        gate = s.string("gate")
        known = (*gates.plantable, ALL) if gates is not None else (gate, ALL)
        if gate not in known:
            raise s.error(NOT_A_GATE.format(gate=gate, known=", ".join(known)), "gate")
        expect = s.string("expect")
        if expect not in ("failed", "error", "passed"):
            raise s.error(f'"{expect}" is not failed or error (caught) nor passed (benign)', "expect")
        fault_id = s.string("id")
        if (why := id_problem(fault_id)) is not None:
            raise s.error(NOT_A_FAULT_ID.format(id=fault_id, why=why), "id")
        fault = Fault(
            id=fault_id,
            file=s.string("file"),
            search=s.string("search"),
            replace=s.string("replace"),
            gate=gate,
            expect=Status(expect),
            profiles=s.strings("profiles"),
            why=s.string("why"),
            missed_by=s.strings("missed_by", required=False),
            fixes=_flag(s, "fixes"),
            every=gates.always if gates is not None else (),
        )
        for j, other in enumerate(fault.missed_by):
            if (gates is not None and other not in known) or other in (ALL, gate):
                raise s.error(NOT_ANOTHER_GATE.format(gate=other, known=", ".join(g for g in known if g not in (ALL, gate))), f"missed_by[{j}]")
        s.done()
        if (why := relative_problem(fault.file)) is not None:
            raise s.error(f'"{fault.file}": {why}', "file")
        if fault.search == fault.replace:
            raise s.error("search and replace are the same: that plants nothing")
        if fault.id in {f.id for f in faults}:
            raise s.error(ID_TWICE.format(id=fault.id), "id")
        faults.append(fault)
    top.done()
    return tuple(faults)


def unjudged(fault: Fault, failing: Mapping[str, str]) -> str | None:
    """Why ``fault`` is not planted: a gate it is judged by fails the unplanted build already (``failing``: gate ->
    which record), so a caught fault would prove nothing and a benign edit would raise the pin's own alarm. A fault
    that ``fixes`` what the pin lacks is judged all the same: that failure is its premise."""
    blocked = [g for g in fault.gates if g in failing and not fault.fixes]
    if not blocked:
        return None
    return NOT_JUDGED.format(blocked="; ".join(BLOCKED_BY.format(gate=g, record=failing[g]) for g in blocked))


def _flag(s: Section, name: str) -> bool:
    value = s._get(name, False)
    if value is not True and value is not False and s.has(name):
        raise s.error(NOT_A_FLAG, name)
    return value is True


def faults_sha256(faults: Sequence[Fault]) -> str:
    """The sha256 of a fault set, by content and in id order: the self-test record carries it, and ship counts only a
    record of the committed faults of its profile (a user's one-fault file, or ``--fault`` picking one, judged less)."""
    import hashlib
    import json

    # every field that changes a verdict: missed_by names gates that must pass planted, fixes flips the premise
    body = [[f.id, f.file, f.search, f.replace, f.gate, f.expect.value, list(f.missed_by), f.fixes] for f in sorted(faults, key=lambda f: f.id)]
    return hashlib.sha256(json.dumps(body).encode()).hexdigest()


def committed_faults_sha256(profile: str) -> str:
    return faults_sha256([f for f in load_faults() if profile in f.profiles])


def stale(fault: Fault, text: str | None) -> str | None:
    """Why ``fault`` no longer applies to ``text`` (the file at pin + series; None: no such file), or None."""
    if text is None:
        return STALE_MISSING.format(file=fault.file)
    n = text.count(fault.search)
    if n == 0:
        return STALE_NO_MATCH.format(file=fault.file, anchor=fault.anchor())
    if n > 1:
        return STALE_MATCHES.format(file=fault.file, count=n, anchor=fault.anchor())
    return None


def files_at(gitdir: Path, tree: str, paths: Sequence[str]) -> dict[str, str | None]:
    """The text of each path in ``tree`` of the fork store (None where the tree has no such file)."""
    git = Git(gitdir)
    out: dict[str, str | None] = {}
    for path in dict.fromkeys(paths):
        done = git.run("cat-file", "-p", f"{tree}:{path}", check=False)
        out[path] = done.output if done.returncode == 0 else None
    return out


def stale_lines(gitdir: Path, tree: str, gates: KnownGates | None = None) -> list[str]:
    """bump_pin's report: each committed fault that no longer applies at ``tree``, as "id: why"."""
    faults = load_faults(gates=gates)
    texts = files_at(gitdir, tree, [f.file for f in faults])
    return [STALE_LINE.format(fault=f.id, why=why) for f in faults if (why := stale(f, texts[f.file])) is not None]
