"""``1bit serve`` on hostile recipes and GGUF files (issue 36): any input is a launch or one line and an exit code,
never a traceback; and a string read from a file reaches the terminal with its control characters escaped.

hypothesis is not installed in the tests' environment, so the fuzzing here is seeded and exhaustive where it can be:
every truncation of a real GGUF (written by the ``gguf`` package, with arrays, nested arrays and a tensor), a
six hundred seeded mutations of it (bytes flipped, lengths and counts set to extremes), the same over the built-in
recipes file, seeded random JSON shaped like a recipes file, and the cases the campaign named: arrays nested
100,000 deep (a RecursionError), a number of 5,000 digits in a recipes file (Python's int-string limit, a ValueError
that is not a JSONDecodeError), and escape sequences in an architecture, a key and a recipe's keys.
"""

from __future__ import annotations

import json
import random
import re
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from serve import cli, recipes
from serve.cli import main
from serve.errors import ServeError, printable
from serve.facts import read_facts
from tests.support.gguf_files import make, write_gguf
from tests.support.route import ERROR_PREFIX

SEED = 36
# what a terminal or str.splitlines acts on: C0 (but the newline that ends a line), DEL, C1, the line and paragraph
# separators, and the bidirectional overrides that reorder what is shown
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
HOSTILE = "\x1b[31mred\x1b]0;owned\x07\r\n\u202egnp.\x85\u2028\x00"


@pytest.fixture(autouse=True)
def _own_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("ONEBIT_SERVE_DEVICE", "GGML_W4A4_TENSORS", "ONEBIT_CI_ROOT", "ONEBIT_SERVE_RELEASE"):
        monkeypatch.delenv(var, raising=False)


def one_line_or_launch(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``1bit serve ARGS --dry-run``: exit 0 with one JSON line, or one error line; nothing raw on the terminal."""
    cut = args.index("--") if "--" in args else len(args)
    try:
        code = main(["serve", *args[:cut], "--dry-run", *args[cut:]])
    except BaseException as exc:  # the point: nothing may escape main
        pytest.fail(f"{args}: {type(exc).__name__} escaped 1bit serve: {exc!r}"[:500])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert not CONTROL.search(err), f"{args}: a control character reached the terminal: {err!r}"[:500]
    if code == 0:
        assert out.count("\n") == 1
        json.loads(out)
        return code, err
    assert code in (2, 4, 5), (args, code, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(ERROR_PREFIX)
    return code, lines[0]


def facts_or_one_line(path: Path, label: str) -> None:
    """read_facts itself: facts, or a ServeError whose text is one printable line."""
    try:
        facts = read_facts(str(path))
    except ServeError as exc:
        text = str(exc)
        assert not CONTROL.search(text), f"{label}: {text!r}"[:500]
        assert "\n" not in text
        return
    except BaseException as exc:
        pytest.fail(f"{label}: {type(exc).__name__}: {exc!r}"[:500])
    assert not CONTROL.search(facts.describe()), f"{label}: {facts.describe()!r}"


# -- GGUF -----------------------------------------------------------------------------------------------------------


def real_gguf(tmp_path: Path) -> bytes:
    path = write_gguf(
        tmp_path / "base.gguf",
        "qwen3moe",
        {"qwen3moe.expert_count": 8, "onebit.hadamard_q4_0": 32, "general.name": "base", "dflash.block_size": 8},
        {"t": np.zeros((2, 32), dtype=np.float32)},
    )
    import gguf

    extra = gguf.GGUFWriter(str(tmp_path / "arrays.gguf"), "qwen3moe")
    extra.add_uint32("qwen3moe.expert_count", 8)
    extra.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])
    extra.add_array("tokenizer.ggml.scores", [0.5, 1.5])
    extra.add_array("nested", [[1, 2], [3]])
    extra.add_tensor("t", np.zeros((2, 32), dtype=np.float32))
    extra.write_header_to_file()
    extra.write_kv_data_to_file()
    extra.write_tensors_to_file()
    extra.close()
    return path.read_bytes() + b"|" + (tmp_path / "arrays.gguf").read_bytes()


def mutations(data: bytes, rng: random.Random, n: int) -> Iterator[tuple[str, bytes]]:
    extremes = [0, 1, 2, 3, 8, 9, 12, 13, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 2**63 - 1, 2**64 - 1]
    for i in range(n):
        buf = bytearray(data)
        kind = i % 3
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif kind == 1:
            at = rng.randrange(len(buf) - 8)
            buf[at : at + 8] = struct.pack("<Q", rng.choice(extremes))
        else:
            at = rng.randrange(len(buf) - 4)
            buf[at : at + 4] = struct.pack("<I", rng.choice(extremes) & 0xFFFFFFFF)
        yield f"mutation {i} ({['bytes', 'u64', 'u32'][kind]})", bytes(buf)


def test_every_truncation_and_six_hundred_mutations_of_a_real_gguf_are_facts_or_one_line(tmp_path: Path) -> None:
    files = real_gguf(tmp_path).split(b"|", 1)
    path = tmp_path / "case.gguf"
    rng = random.Random(SEED)
    for base in files:
        for cut in range(len(base)):
            path.write_bytes(base[:cut])
            facts_or_one_line(path, f"cut at {cut}")
        for label, data in mutations(base, rng, 300):
            path.write_bytes(data)
            facts_or_one_line(path, label)


def test_mutated_ggufs_through_1bit_serve_are_a_launch_or_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = real_gguf(tmp_path).split(b"|", 1)[1]
    rng = random.Random(SEED + 1)
    seen = set()
    for _, data in mutations(base, rng, 300):
        (tmp_path / "m.gguf").write_bytes(data)
        code, _ = one_line_or_launch(capsys, "-m", "m.gguf", "--device", "cpu")
        seen.add(code)
    assert {0, 2} <= seen  # the mutations reach both sides: some still load


def gguf_header(kv: list[bytes], tensors: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, len(kv)) + b"".join(kv)


def gstr(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


ARRAY, UINT8, STRING, UINT32 = 9, 0, 8, 4


def test_arrays_nested_a_hundred_thousand_deep_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    depth = 100_000
    deep = gstr("deep") + struct.pack("<I", ARRAY) + struct.pack("<IQ", ARRAY, 1) * depth + struct.pack("<IQ", UINT8, 0)
    (tmp_path / "deep.gguf").write_bytes(gguf_header([gstr("general.architecture") + struct.pack("<I", STRING) + gstr("qwen35"), deep]))
    facts_or_one_line(tmp_path / "deep.gguf", "nested arrays")  # a RecursionError before
    code, line = one_line_or_launch(capsys, "-m", "deep.gguf")
    assert code == 2
    assert "deep" in line


def test_an_architecture_with_escape_sequences_is_shown_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_gguf(tmp_path / "esc.gguf", HOSTILE, {f"{HOSTILE}.expert_count": 4})
    facts = read_facts("esc.gguf")
    assert facts.architecture == HOSTILE  # kept as read: the keys it names are looked up with it
    assert printable(HOSTILE) in facts.describe()
    code, err = one_line_or_launch(capsys, "-m", "esc.gguf")
    assert code == 0
    assert printable(HOSTILE) in err
    write_gguf(tmp_path / "d.gguf", "dflash", {})
    code, line = one_line_or_launch(capsys, "-m", "d.gguf", "--dflash", "esc.gguf")  # NOT_DFLASH names the architecture
    assert code == 4
    assert printable(HOSTILE) in line


def test_a_key_with_escape_sequences_in_an_error_is_shown_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = gstr(f"k{HOSTILE}") + struct.pack("<I", UINT32) + struct.pack("<I", 1)
    arch = gstr("general.architecture") + struct.pack("<I", STRING) + gstr("qwen35")
    (tmp_path / "twice.gguf").write_bytes(gguf_header([arch, key, key]))
    code, line = one_line_or_launch(capsys, "-m", "twice.gguf")
    assert code == 2
    assert printable(f"k{HOSTILE}") in line
    (tmp_path / "type.gguf").write_bytes(gguf_header([arch, gstr(f"k{HOSTILE}") + struct.pack("<I", 77)]))
    code, line = one_line_or_launch(capsys, "-m", "type.gguf")
    assert code == 2
    assert printable(f"k{HOSTILE}") in line


def test_printable_escapes_what_a_terminal_acts_on_and_keeps_the_rest() -> None:
    assert printable("qwen35 Ünïcødé 模型") == "qwen35 Ünïcødé 模型"
    assert printable("a\x1b[31mb\nc\u202ed\x85") == "a\\x1b[31mb\\nc\\u202ed\\x85"
    assert not CONTROL.search(printable(HOSTILE))


# -- recipes --------------------------------------------------------------------------------------------------------


def recipes_or_one_line(text: str, label: str) -> None:
    try:
        recipes.parse(text, "fuzz.json")
        return
    except ServeError as exc:
        said = str(exc)
    except BaseException as exc:
        pytest.fail(f"{label}: {type(exc).__name__}: {exc!r}"[:500])
    assert "\n" not in said, f"{label}: {said!r}"[:500]
    assert not CONTROL.search(said), f"{label}: {said!r}"[:500]


STRINGS = ["", "x", "-ub", "1024", "--rpc", "rocm", "dflash", "GGML_X", "LLAMA_ARG_HOST", HOSTILE, "k\ney", "é" * 3]
KEYS = [*recipes.RECIPE_KEYS, *recipes.MATCH_KEYS, *recipes.TOP_KEYS, HOSTILE, "k\ney", "GGML_W4A4_TENSORS", "LD_PRELOAD", "x"]


def random_json(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 4 or roll < 0.45:
        return rng.choice([*STRINGS, 0, -1, 1.5, 10**30, True, False, None, float("inf")])
    if roll < 0.7:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(KEYS): random_json(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def random_recipes(rng: random.Random) -> str:
    items = []
    for _ in range(rng.randint(0, 3)):
        item = {"id": rng.choice(["a", "b", HOSTILE, 3]), "measured": rng.choice(["m", "", None])}
        for key in rng.sample(KEYS, rng.randint(0, 4)):
            item[key] = random_json(rng, 2)
        items.append(item)
    doc = {"recipes": items} if rng.random() < 0.9 else random_json(rng)
    return json.dumps(doc, ensure_ascii=rng.random() < 0.5)


def test_seeded_random_recipes_files_are_a_set_or_one_line() -> None:
    rng = random.Random(SEED)
    for i in range(3000):
        recipes_or_one_line(random_recipes(rng), f"random recipes {i}")


def test_mutations_of_the_builtin_recipes_file_are_a_set_or_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = (Path(recipes.__file__).parent / "config" / "recipes.json").read_bytes()
    rng = random.Random(SEED + 2)
    for i in range(1500):
        buf = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        try:
            text = bytes(buf).decode("utf-8")
        except UnicodeDecodeError:
            continue
        recipes_or_one_line(text, f"mutation {i}")
    for cut in range(0, len(base), 7):
        (tmp_path / "cut.json").write_bytes(base[:cut])
        one_line_or_launch(capsys, "-m", make("plain", tmp_path), "--recipes", "cut.json")


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("huge-number", '{"recipes": [{"id": "a", "args": ["-t", "1"], "measured": "m", "match": {"moe": ' + "9" * 5000 + "}}]}"),
        ("huge-number-top", "9" * 5000),
        ("escape-in-a-key", json.dumps({"recipes": [{"id": "a", "args": ["-t", "1"], "measured": "m", HOSTILE: 1}]})),
        ("escape-in-a-match-key", json.dumps({"recipes": [{"id": "a", "args": ["-t", "1"], "measured": "m", "match": {HOSTILE: 1}}]})),
        ("escape-in-a-device", json.dumps({"recipes": [{"id": "a", "args": ["-t", "1"], "measured": "m", "match": {"device": [HOSTILE]}}]})),
        ("escape-in-a-top-key", json.dumps({HOSTILE: 1, "recipes": []})),
        ("escape-twice", '{"recipes": [], "' + HOSTILE.encode("unicode_escape").decode() + '": 1, "' + HOSTILE.encode("unicode_escape").decode() + '": 2}'),
        ("deeply-nested", '{"recipes": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        ("nan", '{"recipes": [{"id": "a", "args": ["-t", "1"], "measured": NaN}]}'),
    ],
)
def test_named_hostile_recipes_files_are_one_line(name: str, content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.json").write_text(content, encoding="utf-8")
    code, line = one_line_or_launch(capsys, "-m", make("plain", tmp_path), "--recipes", "r.json")
    assert code == 2
    assert "r.json" in line


def test_a_recipe_with_escape_sequences_in_its_values_is_shown_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    value = HOSTILE.replace("\x00", "")  # a NUL byte no program can be given is refused (tests/hostile/test_one_line_errors.py)
    doc = {"recipes": [{"id": "a", "args": ["-t", value], "env": {"GGML_X": value}, "measured": "m"}]}
    (tmp_path / "r.json").write_text(json.dumps(doc))
    code, err = one_line_or_launch(capsys, "-m", make("plain", tmp_path), "--recipes", "r.json", "--", "-np", HOSTILE)
    assert code == 0
    assert printable(value) in err
    assert printable(HOSTILE) in err  # the user's own argument, shown as it was given


def test_an_unexpected_error_is_one_line_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(path: str) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("serve.cli.read_facts", broken)
    code = main(["serve", "-m", make("plain", tmp_path), "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 70
    assert out == ""
    assert "Traceback" not in err
    assert err.splitlines() == [f"{ERROR_PREFIX}{cli.INTERNAL_ERROR.format(error='ZeroDivisionError: a bug')}"]
