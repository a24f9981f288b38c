"""One environment for every program a gate or a build starts (issue 36, item 1): an allow-list, never the ledger's key.

Before, every program (cmake running the fork's CMakeLists, test-backend-ops, test-llama-archs, ``1bit serve`` and
llama-server) got this process's whole environment: a fork commit or a patch could read ONEBIT_LEDGER_KEY and sign
any record. LD_PRELOAD and a library path searched from the working directory ran code of anyone's choosing inside
the gates, the working directory was the caller's (a planted ``libgcc_s.so.1`` there ran inside the gates), and a
pass under GGML_VK_DISABLE_GRAPH_OPTIMIZE=1 counted for a ship without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci import cli, command, loaded, processes, schema
from ci import environment as program_environment
from ci.errors import ConfigError, Refused, ServerFailed
from ci.gates import registry
from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports
from ci.pin import pins as pins_mod
from ci.release import binding, ledger
from ci.release import witness as witness_mod
from tests.release.test_ship import GATES, built, record, ship
from tests.support.build import build_cpu
from tests.support.project import Project, pins_text

SECRETS = {ledger.KEY_VAR: "the-ledger-key", witness_mod.WITNESS_VAR: "/var/lib/onebit/ledger.witness"}
SHA = "8abd563db5a3666adbd6eaa50c6826dfbe9abfef"
DUMP_ENV = "import json, os, sys; json.dump({'env': dict(os.environ), 'cwd': os.getcwd(), 'files': os.listdir('.')}, open(sys.argv[1], 'w'))"


def seen(path: Path) -> dict[str, object]:
    return dict(json.loads(path.read_text()))


def env_of(path: Path) -> dict[str, str]:
    env = seen(path)["env"]
    assert isinstance(env, dict)
    return {str(k): str(v) for k, v in env.items()}


def test_the_ledgers_key_and_witness_are_named_as_the_ledger_names_them() -> None:
    assert {ledger.KEY_VAR, witness_mod.WITNESS_VAR} <= set(program_environment.NEVER_PASSED)


def test_no_program_is_given_the_ledgers_key_or_witness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whichever way it is started: the default environment, one the caller built from this process's (as git's is),
    or several programs at once."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    command.run([sys.executable, "-c", DUMP_ENV, str(tmp_path / "default.json")], quiet=True)
    command.run([sys.executable, "-c", DUMP_ENV, str(tmp_path / "given.json")], env=dict(os.environ), quiet=True)
    command.run_together([[sys.executable, "-c", DUMP_ENV, str(tmp_path / "together.json")]], quiet=True)
    for dump in ("default", "given", "together"):
        assert set(SECRETS) & set(env_of(tmp_path / f"{dump}.json")) == set(), dump


def test_a_program_gets_the_allow_list_and_the_variables_that_change_a_result_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_VK_DISABLE_GRAPH_OPTIMIZE", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("SOME_TOKEN_OF_THE_RUNNER", "not for the fork")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-k nothing")
    command.run([sys.executable, "-c", DUMP_ENV, str(tmp_path / "env.json")], quiet=True)
    env = env_of(tmp_path / "env.json")
    assert env["GGML_VK_DISABLE_GRAPH_OPTIMIZE"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["PATH"] == os.environ["PATH"]
    assert "SOME_TOKEN_OF_THE_RUNNER" not in env
    assert "PYTEST_ADDOPTS" not in env
    unexpected = [k for k in env if not (program_environment.passed_on(k) or k == processes.TREE_VAR)]
    assert unexpected == []


def test_a_variable_named_in_onebit_pass_env_is_passed_on_and_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SITE_KNOB", "3")
    monkeypatch.setenv(program_environment.PASS_VAR, "SITE_KNOB ONEBIT_LEDGER_KEY")
    monkeypatch.setenv(ledger.KEY_VAR, "the-ledger-key")
    with pytest.raises(Refused) as exc:  # naming the key is refused outright, as every ONEBIT_* is
        command.run([sys.executable, "-c", DUMP_ENV, str(tmp_path / "env.json")], quiet=True)
    assert exc.value.message == program_environment.NOT_PASSABLE.format(name=ledger.KEY_VAR)
    monkeypatch.setenv(program_environment.PASS_VAR, "SITE_KNOB")
    command.run([sys.executable, "-c", DUMP_ENV, str(tmp_path / "env.json")], quiet=True)
    env = env_of(tmp_path / "env.json")
    assert env["SITE_KNOB"] == "3"
    assert ledger.KEY_VAR not in env  # never, even when named
    assert program_environment.recorded_environment()["SITE_KNOB"] == "3"


@pytest.mark.parametrize(
    "name",
    ["LD_PRELOAD", "LD_AUDIT", "GGML_BACKEND_PATH", "VK_LAYER_PATH", "VK_INSTANCE_LAYERS", "HSA_TOOLS_LIB", "CUDA_INJECTION64_PATH"],
)
def test_a_variable_that_loads_code_is_refused_and_nothing_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, str(tmp_path / "libevil.so"))
    started = tmp_path / "started"
    with pytest.raises(Refused) as exc:
        command.run([sys.executable, "-c", f"open({str(started)!r}, 'w')"], quiet=True)
    assert exc.value.message == program_environment.LOADS_CODE_SET.format(name=name)
    assert not started.exists()


def test_a_flag_given_to_llama_server_through_the_environment_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """llama-server reads each flag from LLAMA_ARG_<FLAG> too: LLAMA_ARG_MODEL would have the gate judge another model."""
    monkeypatch.setenv("LLAMA_ARG_MODEL", str(tmp_path / "other.gguf"))
    with pytest.raises(Refused) as exc:
        command.run([sys.executable, "-c", "pass"], quiet=True)
    assert exc.value.message == program_environment.FLAG_FROM_ENV.format(name="LLAMA_ARG_MODEL")


@pytest.mark.parametrize(("value", "entry"), [("/usr/lib:", ""), (":/usr/lib", ""), ("/usr/lib::/lib", ""), ("lib", "lib"), ("/usr/lib:./x", "./x")])
def test_a_library_path_searched_from_the_working_directory_is_refused(monkeypatch: pytest.MonkeyPatch, value: str, entry: str) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", value)
    with pytest.raises(Refused) as exc:
        command.run([sys.executable, "-c", "pass"], quiet=True)
    assert exc.value.message == program_environment.NOT_ABSOLUTE.format(name="LD_LIBRARY_PATH", entry=entry)


def test_a_library_path_of_system_folders_is_passed_on_and_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Of the system's library folders only (issue 43: tests/hostile/test_foreign_library.py refuses any other)."""
    folders = ":".join(loaded.system_folders()[:2])
    monkeypatch.setenv("LD_LIBRARY_PATH", folders)
    command.run([sys.executable, "-c", DUMP_ENV, str(tmp_path / "env.json")], quiet=True)
    assert env_of(tmp_path / "env.json")["LD_LIBRARY_PATH"] == folders
    assert program_environment.recorded_environment()["LD_LIBRARY_PATH"] == folders


def test_a_program_runs_in_a_fresh_empty_folder_that_goes_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "libgcc_s.so.1").write_bytes(b"planted")
    command.run([sys.executable, "-c", DUMP_ENV, str(tmp_path / "seen.json")], quiet=True)
    s = seen(tmp_path / "seen.json")
    assert s["cwd"] != str(tmp_path)
    assert s["files"] == []
    assert not Path(str(s["cwd"])).exists()


CC = shutil.which("cc") or shutil.which("gcc")


@pytest.mark.skipif(CC is None, reason="needs a C compiler to link real ELF files")
def test_a_library_planted_in_the_callers_folder_is_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A binary whose search path holds '.' (the working directory) before $ORIGIN, run from a folder where
    libfoo.so was planted: the planted one ran (it answered 7, not the build's 42)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "foo.c").write_text("int foo(void) { return 42; }\n")
    (tmp_path / "evil.c").write_text("int foo(void) { return 7; }\n")
    (tmp_path / "main.c").write_text('#include <stdio.h>\nint foo(void);\nint main(void) { printf("%d\\n", foo()); return 0; }\n')
    assert CC is not None
    subprocess.run([CC, "-shared", "-fPIC", "-o", bin_dir / "libfoo.so", tmp_path / "foo.c"], check=True)
    subprocess.run([CC, "-o", bin_dir / "main", tmp_path / "main.c", f"-L{bin_dir}", "-lfoo", "-Wl,--enable-new-dtags", "-Wl,-rpath,.:$ORIGIN"], check=True)
    caller = tmp_path / "caller"
    caller.mkdir()
    subprocess.run([CC, "-shared", "-fPIC", "-o", caller / "libfoo.so", tmp_path / "evil.c"], check=True)
    monkeypatch.chdir(caller)
    assert command.run([str(bin_dir / "main")], quiet=True).output == "42\n"


def dumping_cmake(tmp_path: Path) -> Path:
    """A cmake that records its environment and folder, then runs the real one."""
    real = shutil.which("cmake")
    assert real is not None
    log = tmp_path / "cmake-runs.jsonl"
    wrapper = tmp_path / "wrapper" / "cmake"
    wrapper.parent.mkdir()
    wrapper.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"with open({str(log)!r}, 'a') as f: f.write(json.dumps({{'argv': sys.argv[1:], 'env': dict(os.environ), 'cwd': os.getcwd()}}) + '\\n')\n"
        f"os.execv({real!r}, [{real!r}, *sys.argv[1:]])\n"
    )
    wrapper.chmod(0o755)
    return log


def test_cmake_running_the_forks_cmakelists_gets_the_allow_list(build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = dumping_cmake(tmp_path)
    monkeypatch.setenv("CMAKE", str(tmp_path / "wrapper" / "cmake"))
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SOME_TOKEN_OF_THE_RUNNER", "not for the fork")
    monkeypatch.setenv("GGML_KNOB_OF_THE_RUNNER", "1")
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    steps = [run for run in runs if "-S" in run["argv"] or "--build" in run["argv"]]
    assert len(steps) == 2  # configure, build
    for run in runs:
        assert set(SECRETS) & set(run["env"]) == set(), run["argv"]
    for step in steps:
        assert "SOME_TOKEN_OF_THE_RUNNER" not in step["env"]
        assert step["env"]["GGML_KNOB_OF_THE_RUNNER"] == "1"
        assert not step["cwd"].startswith(str(build_project.root))


def test_the_launcher_a_gate_starts_gets_the_allow_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SOME_TOKEN_OF_THE_RUNNER", "not for the fork")
    argv = (sys.executable, "-c", DUMP_ENV, str(tmp_path / "env.json"))
    launch = ServerLaunch("baseline", argv, "127.0.0.1", free_ports(1)[0], env=(("GGML_SET_BY_THE_GATE", "1"),))
    with pytest.raises(ServerFailed), LlamaServer(launch, tmp_path / "server.log"):
        pass  # it exits before it is healthy, its environment written
    env = env_of(tmp_path / "env.json")
    assert set(SECRETS) & set(env) == set()
    assert "SOME_TOKEN_OF_THE_RUNNER" not in env
    assert env["GGML_SET_BY_THE_GATE"] == "1"
    assert "PYTHONPYCACHEPREFIX" in env


def no_recorded_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's own recorded variables left out (a PYTHONPATH set where the tests run), so that a test sees only
    what it sets."""
    for name in [n for n in os.environ if program_environment.recorded(n)]:
        monkeypatch.delenv(name)


def test_a_pass_under_one_setting_does_not_count_for_another(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/gates.md: GGML_VK_DISABLE_GRAPH_OPTIMIZE=1 turns the MTP leg's verdict on Vulkan; a pass under it counted
    for a ship without it."""
    no_recorded_variables(monkeypatch)
    m = built(build_project)
    monkeypatch.setenv("GGML_VK_DISABLE_GRAPH_OPTIMIZE", "1")
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    monkeypatch.delenv("GGML_VK_DISABLE_GRAPH_OPTIMIZE")
    r = ship(build_project)
    assert r.code == 7, r.out
    changed = binding.CRITERION_CHANGED.format(criterion="environment", judged="{'GGML_VK_DISABLE_GRAPH_OPTIMIZE': '1'}", current="{}")
    assert binding.OTHER_CRITERIA.format(changes=changed) in r.out
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)  # the gates again as ship runs: they count
    assert ship(build_project, "--check").code == 0


def test_every_gates_criteria_carry_the_environment(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    no_recorded_variables(monkeypatch)
    m = built(build_project)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    pins = pins_mod.load(build_project.root / "pins.yaml")
    assert binding.judged_criteria(pins, GATES.route, str(m["profile"]))["environment"] == {"HIP_VISIBLE_DEVICES": "1"}
    for gate in registry.required(pins):
        assert binding.current_criteria(pins, gate, str(m["profile"]))["environment"] == {"HIP_VISIBLE_DEVICES": "1"}, gate


@pytest.mark.parametrize("name", ["PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONSTARTUP", "PYTHONPYCACHEPREFIX", "ONEBIT_RESULTS_DIR", "NOX_DEFAULT_VENV_BACKEND"])
def test_the_judges_own_variables_cannot_be_passed_on_by_name(name: str) -> None:
    """A hostile pass: ONEBIT_PASS_ENV="PYTEST_ADDOPTS" with PYTEST_ADDOPTS="-k test_hadamard_route" made the route
    gate's record 18/18 of 180 tests, and ship counted it."""
    with pytest.raises(Refused) as exc:
        program_environment.environment({"PATH": "/usr/bin", "ONEBIT_PASS_ENV": f"STANDIN {name}", name: "-k x"})
    assert exc.value.message == program_environment.NOT_PASSABLE.format(name=name)
    assert program_environment.environment({"PATH": "/usr/bin", "ONEBIT_PASS_ENV": "PYTHONPATH STANDIN", "STANDIN": "1"})["STANDIN"] == "1"


# -- what pins.yaml names, and what a profile declares, for the build and its gates alike -----------------------------
PINS_NAMES = "\nenvironment: [SITE_KNOB]  # a site's own knob, named where the pin is\n"


def pins_with(text: str) -> pins_mod.Pins:
    return pins_mod.parse(pins_text(SHA, extra=text), Path("pins.yaml"))


def test_pins_yaml_names_a_variable_the_build_and_the_gates_get_and_ship_judges(
    build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pins.yaml's ``environment``: passed to cmake running the fork's CMakeLists and to each gate's programs, and
    recorded in every gate record's ``environment`` criterion, which ship judges against its own run."""
    no_recorded_variables(monkeypatch)
    with build_project.pins.open("a") as fh:
        fh.write(PINS_NAMES)
    log = dumping_cmake(tmp_path)
    monkeypatch.setenv("CMAKE", str(tmp_path / "wrapper" / "cmake"))
    monkeypatch.setenv("SITE_KNOB", "3")
    assert build_cpu(build_project).code == 0
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert [s["env"].get("SITE_KNOB") for s in steps if "-S" in s["argv"] or "--build" in s["argv"]] == ["3", "3"]
    r = build_project.ci("gpu-tests", "--profile", "cpu", "--gate", "backend_ops")  # the fixture's test-backend-ops fails it
    assert r.code == 7, r.out + r.err
    (done,) = ledger.read(build_project.root / "build" / "results" / "ledger.jsonl").records
    assert done.data["criteria"]["environment"] == {"SITE_KNOB": "3"}
    counted = ship(build_project, "--check").out  # judged under the same setting: the record counts, as the failure it is
    assert ["backend_ops", "FAILED"] in [line.split()[:2] for line in counted.splitlines()], counted
    assert "not counted" not in counted
    monkeypatch.setenv("SITE_KNOB", "4")
    changed = binding.CRITERION_CHANGED.format(criterion="environment", judged="{'SITE_KNOB': '3'}", current="{'SITE_KNOB': '4'}")
    assert binding.OTHER_CRITERIA.format(changes=changed) in ship(build_project, "--check").out


def dumped_by_a_gates_programs(tmp_path: Path) -> dict[str, dict[str, str]]:
    """The environment of a program started as each gate starts one: with the default environment (backend_ops, the
    oracle), several at once (archs), and the launcher (equivalence, perf)."""
    command.run([sys.executable, "-c", DUMP_ENV, str(tmp_path / "default.json")], quiet=True)
    command.run_together([[sys.executable, "-c", DUMP_ENV, str(tmp_path / "together.json")]], quiet=True)
    launch = ServerLaunch("baseline", (sys.executable, "-c", DUMP_ENV, str(tmp_path / "server.json")), "127.0.0.1", free_ports(1)[0])
    with pytest.raises(ServerFailed), LlamaServer(launch, tmp_path / "server.log"):
        pass  # it exits before it is healthy, its environment written
    return {dump: env_of(tmp_path / f"{dump}.json") for dump in ("default", "together", "server")}


def test_a_gates_programs_get_the_variables_the_profile_declares_as_its_build_does(
    build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vulkan profile declares VULKAN_SDK, outside every family: its build was given it and its records carried it,
    but test-backend-ops, test-llama-archs and the launcher were started without it. The build and the gates of a job
    now run in one environment, and the records say which."""
    from ci.commands.job import Job
    from ci.compile import profiles

    no_recorded_variables(monkeypatch)
    monkeypatch.setenv("VULKAN_SDK", "/opt/vulkan-sdk")
    job = Job.resolve(build_project.root)
    job.profile("vulkan")
    for dump, env in dumped_by_a_gates_programs(tmp_path).items():
        assert env.get("VULKAN_SDK") == "/opt/vulkan-sdk", dump
    build = program_environment.environment(declared=profiles.PROFILES["vulkan"].variables)  # as build_environment asks for it
    assert build["VULKAN_SDK"] == "/opt/vulkan-sdk"
    assert binding.environment_criterion("vulkan") == {"VULKAN_SDK": "/opt/vulkan-sdk"}
    job.profile("cpu")  # the job of another profile: the vulkan one's variables are not its own
    assert program_environment.environment().get("VULKAN_SDK") is None
    assert binding.environment_criterion("cpu") == {}


def test_a_gates_programs_get_the_variables_pins_yaml_names(
    build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ci.commands.job import Job

    no_recorded_variables(monkeypatch)
    with build_project.pins.open("a") as fh:
        fh.write(PINS_NAMES)
    monkeypatch.setenv("SITE_KNOB", "3")
    Job.resolve(build_project.root).profile("cpu")
    for dump, env in dumped_by_a_gates_programs(tmp_path).items():
        assert env.get("SITE_KNOB") == "3", dump
    assert program_environment.recorded_environment() == {"SITE_KNOB": "3"}


def test_pins_yaml_names_variables_as_a_list() -> None:
    assert pins_with(PINS_NAMES).environment == ("SITE_KNOB",)
    assert pins_with("").environment == ()


JUDGES_OWN = ["PYTEST_ADDOPTS", "PYTHONSTARTUP", "PY_COLORS", "ONEBIT_LEDGER_KEY", "ONEBIT_LEDGER_WITNESS", "ONEBIT_RESULTS_DIR", "NOX_X"]


@pytest.mark.parametrize("name", JUDGES_OWN)
def test_pins_yaml_cannot_name_the_judges_own_variables(name: str) -> None:
    """As ONEBIT_PASS_ENV cannot: pytest's, Python's start-up (but PYTHONPATH), this tool's own and nox's, and never
    the ledger's key or witness."""
    with pytest.raises(ConfigError) as exc:
        pins_with(f"\nenvironment: [SITE_KNOB, {name}]\n")
    problem = pins_mod.NOT_PASSABLE_NAME.format(name=name)
    assert exc.value.message == schema.AT_KEY.format(file="pins.yaml", key="environment", problem=problem)
    assert "\n" not in exc.value.message
    assert pins_with("\nenvironment: [PYTHONPATH]\n").environment == ("PYTHONPATH",)


@pytest.mark.parametrize(
    ("value", "key", "problem"),
    [
        ('"SITE_KNOB"', "environment", schema.NOT_A_LIST_OF_STRINGS.format(value='"SITE_KNOB"')),
        ("{SITE_KNOB: 1}", "environment", schema.NOT_A_LIST_OF_STRINGS.format(value="a mapping")),
        ("[3]", "environment[0]", "3 is not a non-empty string"),
        ("[SITE_KNOB, null]", "environment[1]", "null is not a non-empty string"),
        ("[SITE-KNOB]", "environment", pins_mod.NOT_A_VARIABLE_NAME.format(name="SITE-KNOB")),
        ("[9KNOB]", "environment", pins_mod.NOT_A_VARIABLE_NAME.format(name="9KNOB")),
        ('["SITE_KNOB=1"]', "environment", pins_mod.NOT_A_VARIABLE_NAME.format(name="SITE_KNOB=1")),
    ],
)
def test_pins_yaml_environment_that_is_no_list_of_names_is_one_line(value: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as exc:
        pins_with(f"\nenvironment: {value}\n")
    assert exc.value.message == schema.AT_KEY.format(file="pins.yaml", key=key, problem=problem)


def test_a_refused_name_in_pins_yaml_stops_the_command_in_one_line(build_project: Project) -> None:
    with build_project.pins.open("a") as fh:
        fh.write("\nenvironment: [PYTEST_ADDOPTS]\n")
    r = build_cpu(build_project)
    assert r.code == ConfigError.exit_code
    message = schema.AT_KEY.format(file="pins.yaml", key="environment", problem=pins_mod.NOT_PASSABLE_NAME.format(name="PYTEST_ADDOPTS"))
    assert r.err.strip().splitlines() == [cli.ERROR.format(message=message)]
