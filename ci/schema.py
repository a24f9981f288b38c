"""Reading a parsed YAML/JSON mapping strictly: dotted key paths in every message, did-you-mean for unknown keys.

After cibuildwheel's OptionsReader: the loader walks the document once and returns frozen dataclasses; nothing
past the loader sees a raw dict.
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from ci.errors import ConfigError
from serve.errors import DID_YOU_MEAN as DID_YOU_MEAN  # one suggestion for the launcher and this tool
from serve.errors import did_you_mean as did_you_mean

T = TypeVar("T")
_MISSING = object()

# Messages, shared with the tests that match on them (tests/support/messages.py)
IN_FILE = "{file}: {problem}"
AT_KEY = "{file}: {key}: {problem}"
AT_LINE = "{file}:{line}: {problem}"
EXPECTED_MAPPING = "expected a mapping, got {value}"
UNKNOWN_KEY = "unknown key{suggestion}"  # a DID_YOU_MEAN, or nothing
REQUIRED = "is required"
NOT_AN_INTEGER = "{value} is not an integer"
BELOW_MINIMUM = "{value} is below the minimum {minimum}"
NOT_A_LIST_OF_STRINGS = "{value} is not a list of strings"
VALUE_PROBLEM = "{value} {problem}"  # a check's problem with the value it found
DUPLICATE_KEY = 'the key "{key}" is given twice (line {line}, first at line {first})'
NOT_YAML = "{file}: not valid YAML{where}: {problem}"
YAML_AT_LINE = " at line {line}"


def describe(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value)


class Section:
    """One mapping of a config file, read key by key; :meth:`done` rejects the keys nobody asked for."""

    def __init__(self, file: str, path: str, data: object) -> None:
        self.file = file
        self.path = path
        if not isinstance(data, Mapping):
            raise self.error(EXPECTED_MAPPING.format(value=describe(data)))
        self.data: Mapping[str, Any] = data
        self._known: list[str] = []

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def error(self, message: str, key: str | None = None) -> ConfigError:
        where = self.key(key) if key is not None else self.path
        if where:
            return ConfigError(AT_KEY.format(file=self.file, key=where, problem=message))
        return ConfigError(IN_FILE.format(file=self.file, problem=message))

    def _get(self, name: str, required: bool) -> Any:
        self._known.append(name)
        if name not in self.data:
            if required:
                for other in self.data:  # a misspelt required key: name the typo, not the absence
                    if difflib.get_close_matches(str(other), [name], n=1, cutoff=0.6):
                        raise self.error(UNKNOWN_KEY.format(suggestion=DID_YOU_MEAN.format(choice=name)), str(other))
                raise self.error(REQUIRED, name)
            return _MISSING
        return self.data[name]

    def has(self, name: str) -> bool:
        return name in self.data

    def string(self, name: str, *, required: bool = True, default: str = "", check: Callable[[str], str | None] | None = None) -> str:
        value = self._get(name, required)
        if value is _MISSING:
            return default
        if isinstance(value, dt.date):
            value = value.isoformat()
        if not isinstance(value, str) or not value.strip():
            raise self.error(f"{describe(value)} is not a non-empty string", name)
        if check is not None:
            problem = check(value)
            if problem:
                raise self.error(VALUE_PROBLEM.format(value=describe(value), problem=problem), name)
        return value

    def integer(self, name: str, *, required: bool = True, default: int = 0, minimum: int | None = None) -> int:
        value = self._get(name, required)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(NOT_AN_INTEGER.format(value=describe(value)), name)
        if minimum is not None and value < minimum:
            raise self.error(BELOW_MINIMUM.format(value=value, minimum=minimum), name)
        return value

    def number(
        self, name: str, *, required: bool = True, default: float = 0.0, minimum: float | None = None, maximum: float | None = None
    ) -> float:
        value = self._get(name, required)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(f"{describe(value)} is not a number", name)
        if minimum is not None and value < minimum:
            raise self.error(BELOW_MINIMUM.format(value=value, minimum=minimum), name)
        if maximum is not None and value > maximum:
            raise self.error(f"{value} is above the maximum {maximum}", name)
        return float(value)

    def strings(self, name: str, *, required: bool = True, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        value = self._get(name, required)
        if value is _MISSING:
            return default
        if not isinstance(value, list):
            raise self.error(NOT_A_LIST_OF_STRINGS.format(value=describe(value)), name)
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                raise self.error(f"{describe(item)} is not a non-empty string", f"{name}[{i}]")
        return tuple(value)

    def section(self, name: str, *, required: bool = True) -> Section | None:
        value = self._get(name, required)
        if value is _MISSING:
            return None
        return Section(self.file, self.key(name), value)

    def required_section(self, name: str) -> Section:
        value = self._get(name, True)
        return Section(self.file, self.key(name), value)

    def items(self) -> Iterable[tuple[str, Any]]:
        """Every key of a mapping whose keys are data (op names, profile names); all count as known."""
        self._known.extend(str(k) for k in self.data)
        return ((str(k), v) for k, v in self.data.items())

    def others(self, own: Iterable[str]) -> tuple[tuple[str, Any], ...]:
        """The keys that are not ``own``, with their values, as written: another reader's to parse and check (a gate's
        section of pins.yaml's expect); here they count as known."""
        mine = set(own)
        found = tuple((str(k), v) for k, v in self.data.items() if k not in mine)
        self._known.extend(k for k, _ in found)
        return found

    def done(self) -> None:
        for name in self.data:
            if name not in self._known:
                raise self.error(UNKNOWN_KEY.format(suggestion=did_you_mean(str(name), self._known)), str(name))


# -- strict loaders: a key given twice is an error in every file the project reads ------------------------------


def parse_json(text: str | bytes) -> Any:
    """``json.loads`` that refuses a key given twice (a ValueError), as the launcher reads JSON."""
    from serve.strict import loads

    return loads(text)


def load_json(path: Path, limit: int | None = None) -> Any:
    """A JSON file, strictly: a regular file within ``limit`` bytes (an OSError naming it otherwise)."""
    from serve.bounded import CONFIG_LIMIT, read_regular

    return parse_json(read_regular(path, CONFIG_LIMIT if limit is None else limit))


class _DuplicateKey(ValueError):
    def __init__(self, key: object, line: int, first: int) -> None:
        super().__init__(DUPLICATE_KEY.format(key=key, line=line, first=first))
        self.line = line


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML says keys are unique; PyYAML keeps the last)."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[object, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        if isinstance(key, (str, int, float, bool)) or key is None:
            if key in seen:
                raise _DuplicateKey(key, line, seen[key])
            seen[key] = line
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def parse_yaml(text: str, name: str) -> Any:
    """``text`` as YAML, strictly: a key given twice, a syntax error or a document nested past Python's recursion
    limit is one ConfigError naming ``name`` and the line."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as exc:
        raise ConfigError(AT_LINE.format(file=name, line=exc.line, problem=exc)) from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        mark = getattr(exc, "problem_mark", None)
        opened = getattr(exc, "context_mark", None)
        if opened is not None and "end of stream" in str(problem):  # something opened and never closed: name where
            mark = opened
        where = YAML_AT_LINE.format(line=mark.line + 1) if mark is not None else ""
        raise ConfigError(NOT_YAML.format(file=name, where=where, problem=f"{context + ': ' if context else ''}{problem}")) from None
    except RecursionError:
        raise ConfigError(f"{name}: nested too deeply to be a configuration file") from None
