"""No key in any child, the self-test's included (issue 43, item 6). ``ci/gates/selftest/run.py`` started each fault's
child with the whole ``os.environ``, the ledger's key and witness in it, while other faults' fork code built beside it.
The child gets the one environment of every program now (the parent records; the child only writes its gates' JSON),
and what its gates compare with the last release (the oracle's times, perf's figures) is read by the parent, which
holds the key, and handed to it in a file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ci import environment
from ci.gates.selftest import run as selftest
from ci.release import ledger
from tests.gates.test_selftest import MISSED_BY

SECRETS = {ledger.KEY_VAR: "the-ledger-key", "ONEBIT_LEDGER_WITNESS": "/var/lib/onebit/ledger.witness"}
DUMP_ENV = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"


def test_a_faults_child_is_given_neither_the_key_nor_the_witness_stand_in_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in: the fault's namespace run (unshare and python -m ci selftest-fault, which need a built fork) replaced by
    a Python that writes down the environment it was given."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SITE_KNOB", "3")
    monkeypatch.setenv(environment.PASS_VAR, "SITE_KNOB")
    faults = tmp_path / "missed.yaml"
    faults.write_text(MISSED_BY)
    (fault,) = selftest.load_faults(faults)
    trial = selftest.Trial(fault, tmp_path / fault.id)
    trial.work.mkdir(parents=True)
    seen = tmp_path / "env.json"
    monkeypatch.setattr(selftest, "namespace_argv", lambda *args: [sys.executable, "-c", DUMP_ENV, str(seen)])
    released = {"oracle": ["c14872f" + "0" * 33, {"metrics": {"gdn-gate-one.ms": 1.0}}], "perf": None}
    ((_, code, output, _, _),) = list(selftest._run_all(tmp_path, "cpu", [trial], None, 1, timeout=60.0, released=released))
    assert code == 0, output
    env = json.loads(seen.read_text())
    assert set(SECRETS) & set(env) == set()
    assert env["SITE_KNOB"] == "3"  # what the operator passes on reaches the fault's gates as it reaches gpu_tests'
    assert env[environment.PASS_VAR] == "SITE_KNOB"
    assert json.loads(Path(env[selftest.RELEASED_VAR]).read_text()) == released


def test_the_child_reads_the_release_it_compares_with_from_the_parents_file(tmp_path: Path) -> None:
    path = tmp_path / "released.json"
    path.write_text(json.dumps({"oracle": ["p" * 40, {"metrics": {"a.ms": 2.0}}], "perf": None}))
    released = selftest.released_from(path)
    assert released("oracle") == ("p" * 40, {"metrics": {"a.ms": 2.0}})
    assert released("perf") is None
    assert released("archs") is None
