"""The ledger on a full disk and beside another ledger (issue 36).

A full disk cuts an append short: the kernel writes what fits and says how much (a short write), or the write
succeeds and fsync fails (delayed allocation). Either way the ledger must stay readable, with the records it had, and
the failed append must say so in one line. The short write here is the kernel's own: a child process under
RLIMIT_FSIZE, which makes write(2) stop at the limit and return what it wrote, exactly as ENOSPC does.

Two ledgers (two results directories on one runner) may share one witness file: each keeps its own entry there, so
neither reads the other's count as records removed from itself, and a rewind of either is still caught.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ci.errors import ConfigError
from ci.gates.results import GateResult, Status
from ci.release import ledger
from ci.release import witness as witness_mod

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = ledger.BuildContext("k" * 64, "p" * 40, "s" * 64, "cpu", "CPU")
KEY = b"runner secret"

# The append, in a child whose files may not grow past LIMIT bytes: the ledger's line is cut short by the kernel.
APPEND_UNDER_A_FILE_SIZE_LIMIT = """
import resource, signal, sys
from pathlib import Path
from ci.gates.results import GateResult, Status
from ci.release import ledger
path, limit = Path(sys.argv[1]), int(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG and a short write instead of the signal
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
context = ledger.BuildContext("k" * 64, "p" * 40, "s" * 64, "cpu", "CPU")
try:
    ledger.append(path, GateResult("backend_ops", Status.FAILED, "backend_ops failed"), context, key=sys.argv[3].encode())
except OSError as exc:
    print(f"{exc.filename}: {exc.strerror}", file=sys.stderr)
    sys.exit(3)
"""


def result(gate: str, status: Status = Status.PASSED) -> GateResult:
    return GateResult(gate, status, f"{gate} {status.value}")


def three_records(path: Path, witness: Path | None = None) -> bytes:
    for gate in ("route", "equivalence", "perf"):
        ledger.append(path, result(gate), CONTEXT, key=KEY, witness=witness)
    return path.read_bytes()


def test_a_short_write_on_a_full_disk_leaves_the_ledger_readable_and_says_so_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "results" / "ledger.jsonl"
    intact = three_records(path)
    limit = len(intact) + 37  # room for 37 bytes of the next line
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    child = subprocess.run(
        [sys.executable, "-c", APPEND_UNDER_A_FILE_SIZE_LIMIT, str(path), str(limit), KEY.decode()],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in child.stderr, child.stderr
    assert child.returncode == 3, (child.returncode, child.stderr)
    lines = child.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{path}: ")
    assert "the backend_ops record (failed) was not appended" in lines[0]
    read = ledger.read(path, KEY)  # bricked before: the head had moved to a line that was never whole
    assert [r.gate for r in read.records] == ["route", "equivalence", "perf"]
    assert path.read_bytes() == intact  # the partial line was taken back
    ledger.append(path, result("backend_ops", Status.FAILED), CONTEXT, key=KEY)
    assert [r.gate for r in ledger.read(path, KEY).records] == ["route", "equivalence", "perf", "backend_ops"]


def _failing_on(path: Path, real: Callable[..., object], fail: Callable[[int], bool]) -> Callable[..., object]:
    """``real`` (os.write or os.fsync), failing with ENOSPC where ``fail(fd)`` and ``fd`` is ``path``'s."""

    def call(fd: int, *args: object) -> object:
        if os.path.realpath(f"/proc/self/fd/{fd}") == str(path.resolve()) and fail(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, *args)

    return call


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads which file a descriptor is from /proc")
def test_a_full_disk_seen_by_fsync_takes_the_line_back_and_does_not_count_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Delayed allocation: the write went into the page cache and fsync found no room. The line was whole in the file,
    so a reader counted a record whose append had failed (the head had announced it)."""
    path = tmp_path / "ledger.jsonl"
    intact = three_records(path)
    monkeypatch.setattr(os, "fsync", _failing_on(path, os.fsync, lambda fd: True))
    with pytest.raises(OSError, match="was not appended") as failed:
        ledger.append(path, result("backend_ops", Status.FAILED), CONTEXT, key=KEY)
    monkeypatch.undo()
    assert failed.value.filename == str(path)
    assert failed.value.strerror == ledger.APPEND_FAILED.format(gate="backend_ops", verdict="failed", error=os.strerror(errno.ENOSPC), count=3)
    assert "\n" not in failed.value.strerror
    assert [r.gate for r in ledger.read(path, KEY).records] == ["route", "equivalence", "perf"]
    assert path.read_bytes() == intact


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads which file a descriptor is from /proc")
def test_no_room_for_a_single_byte_is_one_line_and_nothing_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.jsonl"
    intact = three_records(path)
    monkeypatch.setattr(os, "write", _failing_on(path, os.write, lambda fd: True))
    with pytest.raises(OSError, match="was not appended") as failed:
        ledger.append(path, result("route"), CONTEXT, key=KEY)
    monkeypatch.undo()
    assert failed.value.filename == str(path)
    assert failed.value.strerror == ledger.APPEND_FAILED.format(gate="route", verdict="passed", error=os.strerror(errno.ENOSPC), count=3)
    assert path.read_bytes() == intact
    read = ledger.read(path, KEY)
    assert (len(read.records), read.notes) == (3, ())


def test_two_ledgers_share_a_witness_without_reading_each_other_as_rewound(tmp_path: Path) -> None:
    witness = tmp_path / "state" / "ledger.witness"
    a, b = tmp_path / "a" / "ledger.jsonl", tmp_path / "b" / "ledger.jsonl"
    three_records(a, witness)
    ledger.append(b, result("route"), CONTEXT, key=KEY, witness=witness)  # refused before: "rewound: it holds 0, saw 3"
    ledger.append(a, result("backend_ops"), CONTEXT, key=KEY, witness=witness)
    ledger.append(b, result("equivalence"), CONTEXT, key=KEY, witness=witness)
    assert len(ledger.read(a, KEY, witness=witness).records) == 4
    assert len(ledger.read(b, KEY, witness=witness).records) == 2

    # each is still held to its own entry: a rewound by one record (its old head put back) is caught, b is not touched
    saved = tmp_path / "a-at-4"
    shutil.copytree(a.parent, saved)
    ledger.append(a, result("perf", Status.FAILED), CONTEXT, key=KEY, witness=witness)
    for name in ("ledger.jsonl", "ledger.jsonl.head"):
        shutil.copy(saved / name, a.parent / name)
    with pytest.raises(ConfigError) as rewound:
        ledger.read(a, KEY, witness=witness)
    assert rewound.value.message == witness_mod.REWOUND.format(path=a, held=4, witness=witness, var=witness_mod.WITNESS_VAR, seen=5)
    assert len(ledger.read(b, KEY, witness=witness).records) == 2


def test_a_ledger_removed_outright_is_still_caught_by_its_entry(tmp_path: Path) -> None:
    witness = tmp_path / "state" / "ledger.witness"
    a, b = tmp_path / "a" / "ledger.jsonl", tmp_path / "b" / "ledger.jsonl"
    three_records(a, witness)
    ledger.append(b, result("route"), CONTEXT, key=KEY, witness=witness)
    shutil.rmtree(a.parent)
    with pytest.raises(ConfigError) as rewound:
        ledger.read(a, KEY, witness=witness)
    assert rewound.value.message == witness_mod.REWOUND.format(path=a, held=0, witness=witness, var=witness_mod.WITNESS_VAR, seen=3)


def test_the_witness_names_each_ledger_it_keeps(tmp_path: Path) -> None:
    witness = tmp_path / "ledger.witness"
    a, b = tmp_path / "a" / "ledger.jsonl", tmp_path / "b" / "ledger.jsonl"
    three_records(a, witness)
    last = ledger.append(b, result("route"), CONTEXT, key=KEY, witness=witness)
    entries = json.loads(witness.read_text())["ledgers"]
    assert entries[str(b.resolve())] == {"count": 1, "sha256": last.sha256}
    assert entries[str(a.resolve())]["count"] == 3


def test_a_witness_written_before_entries_still_holds_and_becomes_this_ledgers_entry(tmp_path: Path) -> None:
    path, witness = tmp_path / "ledger.jsonl", tmp_path / "ledger.witness"
    three_records(path)
    tip = ledger.read(path, KEY).records[-1].sha256
    witness.write_text(json.dumps({"count": 4, "sha256": "0" * 64}) + "\n")  # the old form: one ledger, unnamed
    with pytest.raises(ConfigError) as rewound:
        ledger.read(path, KEY, witness=witness)
    assert rewound.value.message == witness_mod.REWOUND.format(path=path, held=3, witness=witness, var=witness_mod.WITNESS_VAR, seen=4)
    witness.write_text(json.dumps({"count": 3, "sha256": tip}) + "\n")
    last = ledger.append(path, result("route"), CONTEXT, key=KEY, witness=witness)
    first = ledger.read(path, KEY).records[0].sha256
    entry = {"count": 4, "sha256": last.sha256}
    assert json.loads(witness.read_text()) == {"ledgers": {str(path.resolve()): entry, witness_mod.CHAIN_KEY.format(sha256=first): entry}}


@pytest.mark.parametrize("how", ["another results directory", "a link to the copy"])
def test_an_old_copy_of_a_ledger_put_elsewhere_is_caught_as_rewound(tmp_path: Path, how: str) -> None:
    """The witness kept a ledger's entry by its path: an old copy of a signed ledger (taken before a FAILED record was
    appended) read from another path (ONEBIT_RESULTS_DIR at the copy, or build/results made a link to it) had no
    entry, so the failure was gone unseen. A ledger's chain (its first record) has an entry too now, wherever it lies."""
    witness = tmp_path / "state" / "ledger.witness"
    a = tmp_path / "a" / "ledger.jsonl"
    three_records(a, witness)
    saved = tmp_path / "saved"
    shutil.copytree(a.parent, saved)
    ledger.append(a, result("perf", Status.FAILED), CONTEXT, key=KEY, witness=witness)
    if how == "a link to the copy":
        shutil.rmtree(a.parent)
        a.parent.symlink_to(saved)
        where = a
    else:
        where = saved / "ledger.jsonl"
    with pytest.raises(ConfigError) as rewound:
        ledger.read(where, KEY, witness=witness)
    assert rewound.value.message == witness_mod.REWOUND.format(path=where, held=3, witness=witness, var=witness_mod.WITNESS_VAR, seen=4)
