"""Recipes: tuned llama-server settings as data, each carrying the measurement behind it.

``serve/config/recipes.json`` is built in; ``--recipes FILE`` replaces it and ``--no-recipes`` turns recipes off.
The file is read once, here, into frozen dataclasses; every malformed file stops serve with one line naming the
file, the recipe and the problem (docs/recipes.md lists them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from serve import flags, strict
from serve.bounded import CONFIG_LIMIT, NotARegularFile, read_regular
from serve.errors import A_RECIPES_FILE, AT, NO_SUCH_FILE, NOT_A_FILE, FileProblem, did_you_mean

DEVICES = ("rocm", "vulkan", "cuda", "cpu")
DRAFTERS = ("dflash", "mtp", "none")
TOP_KEYS = ("about", "recipes")
RECIPE_KEYS = ("id", "match", "args", "env", "why", "measured", "source", "check")
LIST_MATCH_KEYS = ("device", "architecture", "drafter")
BOOL_MATCH_KEYS = ("moe", "hadamard_q4_0", "long_model")
MATCH_KEYS = LIST_MATCH_KEYS + BOOL_MATCH_KEYS
BUILTIN_NAME = "serve/config/recipes.json"

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Messages, shared with the tests that match on them (tests/support/messages.py)
# A problem follows the file's name and its place in the file (serve.errors.AT): recipes[0].id, RECIPE: match.device.
RECIPE = 'recipe "{id}"'
NOT_UTF8 = "is not UTF-8 (byte {byte})"
NOT_JSON = "not JSON: {error} at line {line} column {column}"
NOT_READABLE_JSON = "not JSON this reader takes: {error}"
KEY_TWICE = 'key "{key}" is given twice in one object'
NOT_A_RECIPES_OBJECT = '{value} is not an object; expected {{"about": ..., "recipes": [...]}}'
NO_RECIPES_LIST = 'has no "recipes" list'
UNKNOWN = 'unknown {what} "{name}"{suggestion}; known: {known}'
ID_TWICE = 'id "{id}" is listed twice (recipes[{first}] and recipes[{second}])'
NOT_AN_OBJECT = "{value} is not an object"
NOT_A_LIST = "{value} is not a list"
NOT_A_STRING = "{value} is a non-string; expected a string"
ENTRY_NOT_A_STRING = "{value} is a non-string; every entry must be a string"
NOT_A_BOOLEAN = "{value} is not a boolean (true or false)"
IS_EMPTY = "is empty"
NO_ID = 'has no "id"'
BAD_ID = "{value}: an id is letters, digits, '.', '_' and '-'"
ADDS_NOTHING = "adds nothing: give it args or env"
ARGS_NOT_A_FLAG = "args must start with a flag (-x or --xy), not {value}"
NO_MEASURED = 'has no "measured": a recipe without a measurement does not load'
EMPTY_MEASURED = '"measured" is empty: a recipe without a measurement does not load'
EMPTY_MATCH_LIST = "is an empty list, which matches nothing; omit the key to match anything"
ENV_NOT_AN_OBJECT = 'env is {value}, not an object ({{"NAME": "value"}})'
HAS_NUL = "holds a NUL byte, which no argument or variable of a program can carry"
NOT_A_VARIABLE_NAME = "{value} is not an environment variable name"
ENV_REFUSED = "not a variable a recipe may set: recipes set knobs ({prefixes}), never a loader's or a library path"
ENV_IS_A_FLAG = (
    "is one of llama-server's flags as a variable (LLAMA_ARG_*), which serve never sees: a recipe gives flags in args, "
    "and never one that changes where llama-server listens, what it loads or where it writes"
)
ENV_SHAPES_LAUNCH = "changes where llama-server listens, what it loads or where it writes: a recipe sets knobs, never that"
ARG_SHAPES_LAUNCH = "{flag} changes where llama-server listens, what it loads or where it writes: a recipe never gives it (give it after -- yourself)"
# a note on a recipe that matched but found some of its settings given: what it still adds
ALREADY_GIVEN = "recipe {id} matches, but {given} is already given: {rest}"
ADDS_NO_MORE = "adds nothing"
ADDS_THE_REST = "adds the rest"


@dataclass(frozen=True)
class LaunchFacts:
    """What a recipe can match on: the chosen device and what the GGUF headers say."""

    device: str
    architecture: str
    drafter: str  # dflash, mtp or none
    moe: bool
    hadamard_q4_0: bool
    long_model: bool = False  # 1bit serve --long-model: the launch serves long prompts


@dataclass(frozen=True)
class Match:
    """Each key given must hold; an omitted key (None) matches anything."""

    device: tuple[str, ...] | None = None
    architecture: tuple[str, ...] | None = None
    drafter: tuple[str, ...] | None = None
    moe: bool | None = None
    hadamard_q4_0: bool | None = None
    long_model: bool | None = None

    def matches(self, facts: LaunchFacts) -> bool:
        for key in LIST_MATCH_KEYS:
            allowed: tuple[str, ...] | None = getattr(self, key)
            if allowed is not None and getattr(facts, key) not in allowed:
                return False
        for key in BOOL_MATCH_KEYS:
            want: bool | None = getattr(self, key)
            if want is not None and getattr(facts, key) != want:
                return False
        return True


@dataclass(frozen=True)
class Recipe:
    id: str
    match: Match
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    why: str
    measured: str
    source: str
    # how `nox -s bench -- --recipe ID --check` re-measures the claim: a perf check over the configs "with" and
    # "without" the recipe, e.g. "tokens_per_step(with, code) / tokens_per_step(without, code) >= 1.15"
    check: str = ""


@dataclass(frozen=True)
class RecipeSet:
    name: str  # how messages name the file: the path given, or serve/config/recipes.json
    about: str
    recipes: tuple[Recipe, ...]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.recipes)

    def without(self, ids: Sequence[str]) -> RecipeSet:
        return RecipeSet(self.name, self.about, tuple(r for r in self.recipes if r.id not in ids))


@dataclass(frozen=True)
class Applied:
    """What one recipe added to a launch."""

    id: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    def added(self) -> str:
        return " ".join([*self.args, *(f"{k}={v}" for k, v in self.env)])


# -- loading --------------------------------------------------------------------------------------------------


def _describe(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return str(value)


class _Reader:
    def __init__(self, name: str) -> None:
        self.name = name

    def error(self, message: str, where: str = "") -> FileProblem:
        return FileProblem(AT.format(where=where, problem=message) if where else message, self.name)

    def unknown(self, key: str, known: Sequence[str], what: str, where: str) -> FileProblem:
        return self.error(UNKNOWN.format(what=what, name=key, suggestion=did_you_mean(key, known), known=", ".join(known)), where)

    def text(self, value: object, where: str, *, blank_ok: bool = True) -> str:
        if not isinstance(value, str):
            raise self.error(NOT_A_STRING.format(value=_describe(value)), where)
        if "\0" in value:
            raise self.error(HAS_NUL, where)
        if not blank_ok and not value.strip():
            raise self.error(IS_EMPTY, where)
        return value

    def strings(self, value: object, where: str) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.error(NOT_A_LIST.format(value=_describe(value)), where)
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.error(ENTRY_NOT_A_STRING.format(value=_describe(item)), f"{where}[{i}]")
            if not item:
                raise self.error("is an empty string", f"{where}[{i}]")
            if "\0" in item:
                raise self.error(HAS_NUL, f"{where}[{i}]")
            out.append(item)
        return tuple(out)


def parse(text: str, name: str) -> RecipeSet:
    """The recipes in ``text``; ``name`` is how messages name the file."""
    r = _Reader(name)
    try:
        doc = strict.loads(text)
    except strict.DuplicateKey as exc:
        raise r.error(KEY_TWICE.format(key=exc.key)) from None
    except json.JSONDecodeError as exc:
        raise r.error(NOT_JSON.format(error=exc.msg, line=exc.lineno, column=exc.colno)) from None
    except ValueError as exc:  # a number of more digits than Python converts (sys.get_int_max_str_digits)
        raise r.error(NOT_READABLE_JSON.format(error=str(exc).split(";")[0])) from None
    except RecursionError:
        raise r.error("nested too deeply to be a recipes file") from None
    if not isinstance(doc, dict):
        raise r.error(NOT_A_RECIPES_OBJECT.format(value=_describe(doc)))
    for key in doc:
        if key not in TOP_KEYS:
            raise r.unknown(key, TOP_KEYS, "key", "")
    if "recipes" not in doc:
        raise r.error(NO_RECIPES_LIST)
    about = r.text(doc.get("about", ""), "about")
    items = doc["recipes"]
    if not isinstance(items, list):
        raise r.error(NOT_A_LIST.format(value=_describe(items)), "recipes")
    recipes: list[Recipe] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        recipe = _recipe(r, item, i)
        if recipe.id in seen:
            raise r.error(ID_TWICE.format(id=recipe.id, first=seen[recipe.id], second=i))
        seen[recipe.id] = i
        recipes.append(recipe)
    return RecipeSet(name=name, about=about, recipes=tuple(recipes))


def _recipe(r: _Reader, item: object, index: int) -> Recipe:
    where = f"recipes[{index}]"
    if not isinstance(item, dict):
        raise r.error(NOT_AN_OBJECT.format(value=_describe(item)), where)
    if "id" not in item:
        raise r.error(NO_ID, where)
    rid = r.text(item["id"], f"{where}.id", blank_ok=False)
    if not _ID.match(rid):
        raise r.error(BAD_ID.format(value=_describe(rid)), f"{where}.id")
    where = RECIPE.format(id=rid)
    for key in item:
        if key not in RECIPE_KEYS:
            raise r.unknown(key, RECIPE_KEYS, "key", where)
    match = _match(r, item.get("match", {}), where)
    args = r.strings(item["args"], f"{where}: args") if "args" in item else ()
    env = _env(r, item["env"], where) if "env" in item else ()
    if not args and not env:
        raise r.error(ADDS_NOTHING, where)
    if args and not flags.is_flag(args[0]):
        raise r.error(ARGS_NOT_A_FLAG.format(value=_describe(args[0])), where)
    if (why := args_problem(args)) is not None:
        raise r.error(why, f"{where}: args")
    if "measured" not in item:
        raise r.error(NO_MEASURED, where)
    measured = r.text(item["measured"], f"{where}: measured")
    if not measured.strip():
        raise r.error(EMPTY_MEASURED, where)
    return Recipe(
        id=rid,
        match=match,
        args=args,
        env=env,
        why=r.text(item.get("why", ""), f"{where}: why"),
        measured=measured,
        source=r.text(item.get("source", ""), f"{where}: source"),
        check=r.text(item.get("check", ""), f"{where}: check"),
    )


def _match(r: _Reader, value: object, where: str) -> Match:
    if not isinstance(value, dict):
        raise r.error(NOT_AN_OBJECT.format(value=_describe(value)), f"{where}: match")
    fields: dict[str, Any] = {}
    for key, v in value.items():
        at = f"{where}: match.{key}"
        if key in LIST_MATCH_KEYS:
            items = r.strings(v, at)
            if not items:
                raise r.error(EMPTY_MATCH_LIST, at)
            choices = {"device": DEVICES, "drafter": DRAFTERS}.get(key)
            for item in items:
                if choices is not None and item not in choices:
                    raise r.unknown(item, choices, key, at)
            fields[key] = items
        elif key in BOOL_MATCH_KEYS:
            if not isinstance(v, bool):
                raise r.error(NOT_A_BOOLEAN.format(value=_describe(v)), at)
            fields[key] = v
        else:
            raise r.unknown(key, MATCH_KEYS, "match key", where)
    return Match(**fields)


# what a recipe's env may set: the knobs of ggml, llama.cpp and the GPU stacks. Never a variable that loads code or
# points a loader somewhere (LD_PRELOAD once ran a shared library inside llama-server), even under those prefixes.
ENV_PREFIXES = ("GGML_", "LLAMA_", "RADV_", "AMD_", "HSA_", "HIP_", "ROCBLAS_", "HIPBLASLT_", "MIOPEN_", "CUDA_", "ONEBIT_")
ENV_LOADS_CODE = re.compile(r"LIB|PATH|PRELOAD|AUDIT|TOOLS|FILES|LAYER|ICD|DRIVER|PLUGIN|DEBUG_AGENT|OVERRIDE")
# llama-server reads each of its own flags from LLAMA_ARG_<FLAG> as well (common/arg.cpp, set_env): LLAMA_ARG_RPC,
# LLAMA_ARG_HOST and LLAMA_ARG_MODEL loaded, listened and served past serve's own flags, which it never saw. A
# recipe gives flags in args, where serve sees them, refuses those below, and the user's own flag wins.
ENV_FLAG_PREFIX = "LLAMA_ARG_"
# a name part that says where a program listens or connects, what it fetches, or where it writes (LLAMA_LOG_FILE,
# LLAMA_CACHE for downloads, AMD_LOG_LEVEL_FILE, MIOPEN_CUSTOM_CACHE_DIR, ...), under any prefix. Not HOST: a part of
# knobs such as GGML_VK_PREFER_HOST_MEMORY; llama-server's --host is LLAMA_ARG_HOST, refused above.
ENV_SHAPES = re.compile(
    r"(?:^|_)(?:PORT|ADDR|ADDRESS|LISTEN|SOCKET|URL|URI|ENDPOINT|RPC|REMOTE|FILE|DIR|CACHE|SAVE|DUMP|OUTPUT|OUT|LOG_TO|TOKEN|KEY|CERT)(?:_|$)"
)


def env_problem(name: str) -> str | None:
    """Why a recipe may not set ``name``, or None."""
    if name.startswith(ENV_FLAG_PREFIX):
        return ENV_IS_A_FLAG
    if not name.startswith(ENV_PREFIXES) or ENV_LOADS_CODE.search(name):
        return ENV_REFUSED.format(prefixes=", ".join(p + "*" for p in ENV_PREFIXES))
    if ENV_SHAPES.search(name):
        return ENV_SHAPES_LAUNCH
    return None


def args_problem(args: Sequence[str]) -> str | None:
    """Why a recipe may not give ``args``, or None: a flag that changes where llama-server listens, what it loads
    or where it writes (serve.flags.LAUNCH_SHAPING)."""
    for token in args:
        if flags.is_flag(token) and flags.shapes_launch(token):
            return ARG_SHAPES_LAUNCH.format(flag=token.split("=", 1)[0])
    return None


def _env(r: _Reader, value: object, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise r.error(ENV_NOT_AN_OBJECT.format(value=_describe(value)), where)
    out = []
    for name, v in value.items():
        if not _ENV_NAME.match(name):
            raise r.error(NOT_A_VARIABLE_NAME.format(value=_describe(name)), f"{where}: env")
        if (why := env_problem(name)) is not None:
            raise r.error(why, f"{where}: env.{name}")
        out.append((name, r.text(v, f"{where}: env.{name}")))
    return tuple(out)


def load(path: str) -> RecipeSet:
    """The recipes file at ``path`` (as the user gave it)."""
    try:
        raw = read_regular(path, CONFIG_LIMIT)
    except FileNotFoundError:
        raise FileProblem(NO_SUCH_FILE, path) from None
    except NotARegularFile as exc:
        raise FileProblem(NOT_A_FILE.format(kind=str(exc.strerror).split(",")[0], what=A_RECIPES_FILE), path) from None
    except OSError as exc:
        raise FileProblem(f"cannot be read ({exc.strerror or exc})", path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(NOT_UTF8.format(byte=exc.start), path) from None
    return parse(text, path)


def builtin() -> RecipeSet:
    """The recipes that ship in the package."""
    text = resources.files("serve").joinpath("config").joinpath("recipes.json").read_text(encoding="utf-8")
    return parse(text, BUILTIN_NAME)


# -- applying -------------------------------------------------------------------------------------------------


def apply(
    recipes: RecipeSet, facts: LaunchFacts, command: Sequence[str], env_set: Collection[str]
) -> tuple[tuple[Applied, ...], tuple[str, ...]]:
    """The recipes that add something to this launch, in file order, and notes on those that matched but did not.

    ``command`` is the llama-server command line so far (serve's flags and the user's); ``env_set`` the names
    already set (the environment and what serve adds). A recipe never adds a flag the command has (any
    spelling) or a variable already set; the first recipe to add a flag wins.
    """
    have = flags.flags_in(command)
    names = set(env_set)
    applied: list[Applied] = []
    notes: list[str] = []
    for recipe in recipes.recipes:
        if not recipe.match.matches(facts):
            continue
        args: list[str] = []
        kept: list[str] = []
        for unit in flags.units(recipe.args):
            flag = flags.canonical(unit[0])
            if flag in have:
                kept.append(unit[0])
                continue
            have.add(flag)
            args.extend(unit)
        env: list[tuple[str, str]] = []
        for name, value in recipe.env:
            if name in names:
                kept.append(name)
                continue
            names.add(name)
            env.append((name, value))
        if kept:
            rest = ADDS_NO_MORE if not args and not env else ADDS_THE_REST
            notes.append(ALREADY_GIVEN.format(id=recipe.id, given=", ".join(kept), rest=rest))
        if args or env:
            applied.append(Applied(id=recipe.id, args=tuple(args), env=tuple(env)))
    return tuple(applied), tuple(notes)
