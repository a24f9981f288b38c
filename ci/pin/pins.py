"""pins.yaml: the one record of what is pinned, loaded strictly into frozen dataclasses.

Edits go through :func:`edit_fork`, which replaces scalar values in place so that comments, quoting style of
untouched keys and key order stay exactly as a person wrote them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from ci import defaults
from ci.environment import JUDGES_OWN, not_passable
from ci.errors import ConfigError
from ci.schema import Section, describe, did_you_mean, parse_yaml

PINS_FILE = "pins.yaml"
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
PLAIN_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./@+-]*$")
OP_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_FOUND = "{path}: not found; run from the repository root or pass --root DIR (the onebit-ci checkout)"
UNREADABLE = "{file}: cannot be read ({error})"
NOT_A_FULL_SHA = "is not a full 40-hex sha"
NOT_AN_HTTPS_URL = "is not an https:// URL"
NOT_A_BRANCH_NAME = "is not a branch name (give it without refs/heads/)"
NOT_A_RELATIVE_PATH = "is not a relative path inside the repository"
NOT_A_DATE = "is not a date (YYYY-MM-DD)"
OMIT_NOT_RELATIVE = '"{path}" is not a relative path inside the checkout'
OWN_EXPECT = ("archs", "backend_ops")  # what this module parses of expect; the rest is the gates'
ARCHS_EMPTY = "is empty; list the architectures test-llama-archs must pass, or leave the key out for the default"
NOT_AN_ARCH = '"{arch}" is not an architecture name (lower case, as test-llama-archs -a takes it)'
NOT_AN_OP = "is not a ggml op name (upper case, as test-backend-ops -o takes it)"
NOT_A_CMAKE_FLAG = '"{flag}" is not a CMake cache flag (-DNAME=VALUE, NAME of letters, digits and _)'
NOT_A_VARIABLE_NAME = "{name} is not a variable name (letters, digits and _, not starting with a digit); name it as the environment does"
NOT_PASSABLE_NAME = "{name}: " + JUDGES_OWN + "; take it out"
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _full_sha(value: str) -> str | None:
    return None if SHA_RE.match(value) else NOT_A_FULL_SHA


def check_url(value: str) -> str | None:
    """Why ``value`` is not a fork URL pins.yaml can record, or None."""
    return None if value.startswith("https://") and len(value) > len("https://") and not any(c.isspace() for c in value) else NOT_AN_HTTPS_URL


def _branch(value: str) -> str | None:
    if value.startswith(("refs/", "-")) or ".." in value or " " in value or value.endswith("/"):
        return NOT_A_BRANCH_NAME
    return None


def _relpath(value: str) -> str | None:
    p = PurePosixPath(value)
    if p.is_absolute() or ".." in p.parts or value.endswith("/"):
        return NOT_A_RELATIVE_PATH
    return None


def _iso_date(value: str) -> str | None:
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return NOT_A_DATE
    return None


@dataclass(frozen=True)
class Fork:
    url: str
    branch: str
    commit: str
    reference: str
    date: str

    @property
    def short(self) -> str:
        return self.commit[:7]


TOOLCHAIN_KEYS = ("cmake", "rocm", "cuda", "cxx", "vulkan")
VERSION_RE = re.compile(r"^\d+(\.\d+){0,3}$")
# a build target is a binary of the fork (the gates run it): a name, never a flag; CMake's own targets build none
TARGET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
META_TARGETS = ("all", "clean", "install", "help", "edit_cache", "rebuild_cache", "list_install_components", "test", "package")


def target_problem(name: str) -> str | None:
    """Why ``name`` cannot be a build target (a binary the gates run), or None."""
    if not TARGET_NAME.match(name):
        return f'"{name}" is not a target name (letters, digits, _ . + -; not a flag)'
    if name in META_TARGETS:
        return f"\"{name}\" is one of CMake's own targets, not a binary; name the fork's binaries (llama-server, test-backend-ops, ...)"
    return None


@dataclass(frozen=True)
class BuildConfig:
    """pins.yaml ``build``: CMake flags of this pin (all profiles, and per profile), minimum toolchain, targets."""

    flags: tuple[str, ...] = ()
    profile_flags: tuple[tuple[str, tuple[str, ...]], ...] = ()
    minimums: tuple[tuple[str, str], ...] = ()
    targets: tuple[str, ...] = ("test-backend-ops", "llama-server")

    def flags_for(self, profile: str) -> tuple[str, ...]:
        return dict(self.profile_flags).get(profile, ())

    def minimum(self, tool: str) -> str | None:
        return dict(self.minimums).get(tool)


@dataclass(frozen=True)
class ModelRef:
    """A model file named in pins.yaml: its path (relative to the repository, or absolute) and, for the release
    models, the sha256 it must have."""

    path: str
    sha256: str | None = None


@dataclass(frozen=True)
class Floors:
    """pins.yaml ``equivalence.floors``: the evidence below which a pass proves too little. Per prompt, the drafter
    leg's drafted tokens the target accepted (the accept path) and rejected (the rollback path); over the run, the
    acceptance. Below one, the verdict is *insufficient evidence*, naming the figure and the floor."""

    accepted: int = defaults.FLOOR_ACCEPTED
    rejected: int = defaults.FLOOR_REJECTED
    acceptance: float = defaults.FLOOR_ACCEPTANCE

    def describe(self) -> str:
        return f"accepted >= {self.accepted} and rejected >= {self.rejected} drafted tokens per prompt, acceptance >= {self.acceptance:g}"


@dataclass(frozen=True)
class EquivalenceConfig:
    """pins.yaml ``equivalence``: the greedy-equivalence gate's threshold and models for this pin."""

    near_tie_nats: float = defaults.NEAR_TIE
    tokens: int = defaults.TOKENS
    model: ModelRef | None = None  # None: the gate's tiny generated models
    drafter: ModelRef | None = None
    spec_type: str | None = None
    floors: Floors = field(default_factory=Floors)


@dataclass(frozen=True)
class Pins:
    """What is pinned, and what the gates must see at that pin."""

    path: Path
    text: str
    fork: Fork
    submodule: str
    omit: tuple[str, ...] = ()
    backend_ops: tuple[tuple[str, int], ...] = field(default=())
    # where each count comes from (an entry {cases: N, from: "engine #194 ..."}): the engine PR that measured it
    backend_ops_from: tuple[tuple[str, str], ...] = field(default=())
    build: BuildConfig = field(default_factory=BuildConfig)
    equivalence: EquivalenceConfig = field(default_factory=EquivalenceConfig)
    release_require: tuple[str, ...] = ()  # gates ship requires beyond route, backend_ops and equivalence
    archs: tuple[str, ...] = defaults.ARCHS  # expect.archs: the architectures the archs gate runs test-llama-archs for
    # expect's other keys, as written: each is a gate's own section (expect.oracle), which the gate parses and the
    # registry checks names a gate (ci.gates.registry.check_expect), as release.require's names are checked
    gate_expect: tuple[tuple[str, Any], ...] = ()
    # variables of the machine's environment the pin's build and gates need: passed on and recorded in every gate
    # record as a profile's declared variables are (ci.environment.declare)
    environment: tuple[str, ...] = ()

    def gate_section(self, gate: str) -> Section | None:
        """pins.yaml's ``expect.GATE``, for the gate to read (errors name the file and the dotted key), or None."""
        raw = dict(self.gate_expect)
        return Section(self.path.name, f"expect.{gate}", raw[gate]) if gate in raw else None

    def expected_cases(self) -> dict[str, int]:
        return dict(self.backend_ops)

    def cases_from(self, op: str) -> str:
        """Where pins.yaml's count of ``op`` comes from ("" when its entry is a bare number)."""
        return dict(self.backend_ops_from).get(op, "")


def load(path: Path) -> Pins:
    """Read and validate ``path``; every problem is a :class:`ConfigError` naming the file and dotted key."""
    name = path.name
    from serve.bounded import CONFIG_LIMIT, read_regular

    raw = b""
    try:
        raw = read_regular(path, CONFIG_LIMIT)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(NOT_FOUND.format(path=path)) from None
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{name}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); write it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(UNREADABLE.format(file=name, error=exc.strerror)) from None
    return parse(text, path, name)


def parse(text: str, path: Path, name: str = PINS_FILE) -> Pins:
    data = parse_yaml(text, name)
    top = Section(name, "", data if data is not None else {})
    fork_s = top.required_section("fork")
    fork = Fork(
        url=fork_s.string("url", check=check_url),
        branch=fork_s.string("branch", check=_branch),
        commit=fork_s.string("commit", check=_full_sha),
        reference=fork_s.string("reference"),
        date=fork_s.string("date", check=_iso_date),
    )
    fork_s.done()
    submodule = top.string("submodule", check=_relpath)
    omit: tuple[str, ...] = ()
    checkout = top.section("checkout", required=False)
    if checkout is not None:
        omit = checkout.strings("omit", required=False)
        for i, p in enumerate(omit):
            stripped = p.rstrip("/")
            if not stripped or _relpath(stripped):
                raise checkout.error(OMIT_NOT_RELATIVE.format(path=p), f"omit[{i}]")
        omit = tuple(p.rstrip("/") + "/" for p in omit)
        checkout.done()
    cases: list[tuple[str, int]] = []
    sources: list[tuple[str, str]] = []
    archs: tuple[str, ...] = defaults.ARCHS
    gate_expect: tuple[tuple[str, Any], ...] = ()
    expect = top.section("expect", required=False)
    if expect is not None:
        gate_expect = expect.others(OWN_EXPECT)  # each a gate's own section: the registry checks the names
        archs = expect.strings("archs", required=False, default=defaults.ARCHS)
        if not archs:
            raise expect.error(ARCHS_EMPTY, "archs")
        for i, arch in enumerate(archs):
            if not ARCH_RE.match(arch):
                raise expect.error(NOT_AN_ARCH.format(arch=arch), f"archs[{i}]")
        ops = expect.section("backend_ops", required=False)
        if ops is not None:
            for op, value in ops.items():
                if not OP_RE.match(op):
                    raise ops.error(NOT_AN_OP, op)
                if isinstance(value, dict):  # {cases: N, from: "engine #194 ..."}: the count and where it comes from
                    entry = ops.required_section(op)
                    cases.append((op, entry.integer("cases", minimum=1)))
                    sources.append((op, entry.string("from")))
                    entry.done()
                else:
                    cases.append((op, ops.integer(op, minimum=1)))
            ops.done()
        expect.done()
    build = _build_config(top.section("build", required=False))
    equivalence = _equivalence_config(top.section("equivalence", required=False))
    require: tuple[str, ...] = ()
    release = top.section("release", required=False)
    if release is not None:
        require = release.strings("require", required=False)  # gate names: the registry checks them (ci.gates.registry.check_require)
        release.done()
    environment = _environment(top)
    top.done()
    return Pins(
        path=path, text=text, fork=fork, submodule=submodule, omit=omit, backend_ops=tuple(cases), build=build, equivalence=equivalence,
        backend_ops_from=tuple(sources),
        release_require=require,
        archs=archs,
        gate_expect=gate_expect,
        environment=environment,
    )


def _environment(top: Section) -> tuple[str, ...]:
    """``environment: [NAME, ...]``: variable names, none of the judges' own (as ONEBIT_PASS_ENV's)."""
    names = top.strings("environment", required=False)
    for name in names:
        if not VARIABLE_NAME.fullmatch(name):
            raise top.error(NOT_A_VARIABLE_NAME.format(name=name), "environment")
        if not_passable(name):
            raise top.error(NOT_PASSABLE_NAME.format(name=name), "environment")
    return names


def _model_ref(section: Section, key: str) -> ModelRef | None:
    """``key: PATH`` or ``key: {path: PATH, sha256: HEX}``."""
    if not section.has(key):
        return None
    if not isinstance(section.data[key], Mapping):
        return ModelRef(section.string(key))
    ref = section.required_section(key)
    path = ref.string("path")
    digest = ref.string("sha256", required=False, default="") or None
    if digest is not None and not re.match(r"^[0-9a-f]{64}$", digest):
        raise ref.error(f'"{digest}" is not a sha256 (64 lowercase hex digits)', "sha256")
    ref.done()
    return ModelRef(path, digest)


def _equivalence_config(section: Section | None) -> EquivalenceConfig:
    if section is None:
        return EquivalenceConfig()
    default = EquivalenceConfig()
    config = EquivalenceConfig(
        near_tie_nats=section.number("near_tie_nats", required=False, default=default.near_tie_nats, minimum=0.0),
        tokens=section.integer("tokens", required=False, default=default.tokens, minimum=1),
        model=_model_ref(section, "model"),
        drafter=_model_ref(section, "drafter"),
        spec_type=section.string("spec_type", required=False, default="") or None,
        floors=_floors(section.section("floors", required=False)),
    )
    if (config.model is None) != (config.drafter is None):
        raise section.error("give both model and drafter, or neither (the gate's tiny models)")
    section.done()
    return config


def _floors(section: Section | None) -> Floors:
    if section is None:
        return Floors()
    default = Floors()
    floors = Floors(
        accepted=section.integer("accepted", required=False, default=default.accepted, minimum=1),
        rejected=section.integer("rejected", required=False, default=default.rejected, minimum=1),
        acceptance=section.number("acceptance", required=False, default=default.acceptance, minimum=0.0, maximum=1.0),
    )
    section.done()
    return floors


CMAKE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.+-]*$")
DEFAULT_TARGETS = ("test-backend-ops", "llama-server")
ARCH_RE = re.compile(r"^[a-z0-9_-]+$")


def cmake_flag_name(flag: str) -> str:
    """NAME of ``-DNAME=VALUE`` or ``-DNAME:TYPE=VALUE``; a ConfigError for anything CMake would not take as a
    cache variable (no name, a space in it, no ``=``)."""
    body = flag[2:] if flag.startswith("-D") else ""
    name, eq, _ = body.partition("=")
    name = name.split(":", 1)[0]
    if not eq or not CMAKE_NAME_RE.match(name):
        raise ConfigError(NOT_A_CMAKE_FLAG.format(flag=flag))
    return name


def _flags(section: Section, key: str) -> tuple[str, ...]:
    flags = section.strings(key, required=False)
    for i, flag in enumerate(flags):
        try:
            cmake_flag_name(flag)
        except ConfigError:
            raise section.error(f'"{flag}" is not a CMake cache flag (-DNAME=VALUE)', f"{key}[{i}]") from None
    return flags


def _build_config(section: Section | None) -> BuildConfig:
    if section is None:
        return BuildConfig()
    flags = _flags(section, "flags")
    per_profile: list[tuple[str, tuple[str, ...]]] = []
    profiles = section.section("profiles", required=False)
    if profiles is not None:
        for name, _ in profiles.items():  # the names are checked against the profiles by the build stage
            per_profile.append((name, _flags(profiles, name)))
        profiles.done()
    minimums: list[tuple[str, str]] = []
    toolchain = section.section("toolchain", required=False)
    if toolchain is not None:
        for tool, value in toolchain.items():
            if tool not in TOOLCHAIN_KEYS:
                raise toolchain.error(f"unknown tool{did_you_mean(tool, TOOLCHAIN_KEYS)}; known: {', '.join(TOOLCHAIN_KEYS)}", tool)
            if not isinstance(value, str) or not VERSION_RE.match(value):
                # unquoted, YAML reads 3.10 as the number 3.1
                raise toolchain.error(f'{describe(value)} is not a quoted version (write it as "6.4")', tool)
            minimums.append((tool, value))
        toolchain.done()
    targets = section.strings("targets", required=False, default=DEFAULT_TARGETS)
    for i, name in enumerate(targets):
        if (problem := target_problem(name)) is not None:
            raise section.error(problem, f"targets[{i}]")
    section.done()
    return BuildConfig(flags=flags, profile_flags=tuple(per_profile), minimums=tuple(minimums), targets=targets)


def edit_fork(text: str, changes: dict[str, str], name: str = PINS_FILE) -> str:
    """``text`` with the given ``fork.*`` scalars replaced in place; everything else byte for byte."""
    root = yaml.compose(text)
    fork_node = _child(root, "fork", name)
    spans: list[tuple[int, int, str]] = []
    for key, value in changes.items():
        node = _child(fork_node, key, name, parent="fork")
        if not isinstance(node, yaml.ScalarNode):
            raise ConfigError(f"{name}: fork.{key}: expected a scalar")
        spans.append((node.start_mark.index, node.end_mark.index, _scalar(key, value, node.style)))
    out = text
    for start, end, new in sorted(spans, reverse=True):
        out = out[:start] + new + out[end:]
    parse(out, Path(name), name)  # an edit that breaks the file is a bug here, never written
    return out


def edit_cases(text: str, counts: Mapping[str, int], sources: Mapping[str, str], name: str = PINS_FILE) -> str:
    """``text`` with ``expect.backend_ops``' count of each op in ``counts`` replaced in place (a bare number, or an
    entry's ``cases``), and an entry's ``from`` by ``sources[op]`` where given; everything else byte for byte."""
    ops = _child(_child(yaml.compose(text), "expect", name), "backend_ops", name, parent="expect")
    spans: list[tuple[int, int, str]] = []
    for op, n in counts.items():
        node = _child(ops, op, name, parent="expect.backend_ops")
        if isinstance(node, yaml.MappingNode):
            cases = _child(node, "cases", name, parent=f"expect.backend_ops.{op}")
            spans.append((cases.start_mark.index, cases.end_mark.index, str(n)))
            if op in sources:
                source = _child(node, "from", name, parent=f"expect.backend_ops.{op}")
                spans.append((source.start_mark.index, source.end_mark.index, json.dumps(sources[op])))
        elif isinstance(node, yaml.ScalarNode):
            spans.append((node.start_mark.index, node.end_mark.index, str(n)))
        else:
            raise ConfigError(f"{name}: expect.backend_ops.{op}: expected a count or {{cases: N, from: ...}}")
    out = text
    for start, end, new in sorted(spans, reverse=True):
        out = out[:start] + new + out[end:]
    parse(out, Path(name), name)  # an edit that breaks the file is a bug here, never written
    return out


def _child(node: yaml.Node | None, key: str, name: str, parent: str = "") -> yaml.Node:
    where = f"{parent}.{key}" if parent else key
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{name}: {parent or 'top level'}: expected a mapping")
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key and isinstance(v, yaml.Node):
            return v
    raise ConfigError(f"{name}: {where}: is required")


def _scalar(key: str, value: str, style: str | None) -> str:
    if key == "date" or (SHA_RE.match(value) and not value.isdigit()):
        return value  # a sha of decimal digits alone would load as an integer
    if style == "'" and "'" not in value:
        return f"'{value}'"
    if style is None and PLAIN_RE.match(value) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)
