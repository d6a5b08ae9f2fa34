"""patchkit.targets.processes: name running processes that started before a change.

Real processes are started from stand-in packages written here (``sglang`` and
``vllm`` folders whose modules print "ready" and block on stdin) with the Python of
virtualenvs made in a temporary folder.  Tests wait for conditions ("ready" on
stdout, the boot clock passing a tick), never for a duration, and only look at the
pids they started: other processes on the machine may match too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import patchkit
from patchkit.targets import processes
from patchkit.targets.processes import Process, parse_start_ticks, restart_lines, runs_project, stale_processes
from support.procs import TICK_NS, after_start, running

SERVER = 'import sys\nprint("ready", flush=True)\nsys.stdin.read()  # until the test closes stdin or kills us\n'
SELF_CHECK = (
    "import json, os, time\n"
    "from patchkit.targets.processes import stale_processes\n"
    "later = time.time_ns() + 60 * 10**9  # any process already running started before then\n"
    'named = [p.pid for p in stale_processes("sglang", later, None)]\n'
    'print(json.dumps({"self": os.getpid(), "named": named}))\n'
)

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc"),
    pytest.mark.servers,  # stand-in servers: see the marker in pyproject.toml
]


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    """A folder for PYTHONPATH with stand-in sglang and vllm packages, and a console script bin/sglang."""
    root = tmp_path_factory.mktemp("standin")
    files = {
        "sglang/__init__.py": "",
        "sglang/__main__.py": SERVER,
        "sglang/launch_server.py": SERVER,
        "sglang/selfcheck.py": SELF_CHECK,
        "vllm/__init__.py": "",
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/api_server.py": SERVER,
        "bin/sglang": SERVER,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def make_venv(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return folder


@pytest.fixture(scope="module")
def venv_v(tmp_path_factory) -> Path:
    return make_venv(tmp_path_factory.mktemp("envs") / "V")


@pytest.fixture(scope="module")
def venv_w(tmp_path_factory) -> Path:
    return make_venv(tmp_path_factory.mktemp("envs") / "W")


def named(project: str, changed_ns: int, prefix: Path | None = None) -> dict[int, Process]:
    return {p.pid: p for p in stale_processes(project, changed_ns, prefix)}


def test_process_started_before_the_change_is_named_with_pid_and_cmdline(standin, venv_v):
    before = time.time_ns()
    with running([venv_v / "bin/python", "-m", "sglang.launch_server", "--port", "1"], standin) as proc:
        changed = after_start(proc.pid)
        procs = stale_processes("sglang", changed, None)
        found = {p.pid: p for p in procs}
        assert found[proc.pid].cmdline == f"{venv_v}/bin/python -m sglang.launch_server --port 1"
        assert before - TICK_NS < found[proc.pid].started_ns <= changed
        assert [p.pid for p in procs] == sorted(found)
        assert os.getpid() not in found


def test_process_started_after_the_change_is_not_named(standin, venv_v):
    changed = time.time_ns()
    with running([venv_v / "bin/python", "-m", "sglang.launch_server"], standin) as proc:
        assert proc.pid not in named("sglang", changed)
        assert proc.pid in named("sglang", after_start(proc.pid))  # the same process, seen once it is older


def test_process_of_another_project_is_not_named(standin, venv_v):
    with running([venv_v / "bin/python", "-m", "vllm.entrypoints.api_server"], standin) as proc:
        changed = after_start(proc.pid)
        assert proc.pid not in named("sglang", changed)
        assert proc.pid in named("vllm", changed)


def test_interpreter_prefix_selects_the_environment(standin, venv_v, venv_w):
    with running([venv_v / "bin/python", "-m", "sglang.launch_server"], standin) as proc:
        changed = after_start(proc.pid)
        assert proc.pid in named("sglang", changed, venv_v)
        assert proc.pid not in named("sglang", changed, venv_w)
        assert proc.pid in named("sglang", changed, None)


@pytest.mark.parametrize(
    "how",
    ["bare name found on the PATH of the process", "relative to the cwd of the process"],
)
def test_interpreter_given_without_an_absolute_path(standin, venv_v, venv_w, how):
    if how.startswith("bare"):
        argv, popen = ["python"], {"env": {"PATH": f"{venv_v}/bin{os.pathsep}{os.defpath}"}}
    else:
        argv, popen = ["bin/python"], {"cwd": venv_v}
    with running(argv + ["-m", "sglang.launch_server"], standin, **popen) as proc:
        changed = after_start(proc.pid)
        assert proc.pid in named("sglang", changed, venv_v)
        assert proc.pid not in named("sglang", changed, venv_w)


def test_system_prefix_matches_its_binary_but_not_a_venv_built_on_it(standin, venv_v, tmp_path):
    base = os.path.realpath(venv_v / "bin/python")  # the interpreter the venv was made from
    system = tmp_path / "system"
    (system / "bin").mkdir(parents=True)
    (system / "bin/python3").symlink_to(base)
    with running([base, "-m", "sglang.launch_server"], standin) as plain:
        with running([venv_v / "bin/python", "-m", "sglang.launch_server"], standin) as in_venv:
            changed = max(after_start(plain.pid), after_start(in_venv.pid))
            assert plain.pid in named("sglang", changed, system)  # same binary, another name
            assert in_venv.pid not in named("sglang", changed, system)  # runs V's site-packages
            assert plain.pid not in named("sglang", changed, venv_v)
            (system / "pyvenv.cfg").write_text("home = /nowhere\n")  # now a venv: only its bin/ counts
            assert plain.pid not in named("sglang", changed, system)


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "sglang"],
        ["-msglang.launch_server"],
        ["-X", "utf8", "-m", "sglang.launch_server", "--port", "1"],
        ["{standin}/sglang/launch_server.py"],
        ["{standin}/bin/sglang", "serve"],  # what the kernel runs for a console script's #! line
    ],
    ids=["-m sglang", "-msglang.x", "-X then -m", "script in the package", "console script"],
)
def test_argv_forms_that_run_the_project_are_named(standin, venv_v, args):
    argv = [venv_v / "bin/python"] + [a.format(standin=standin) for a in args]
    with running(argv, standin) as proc:
        changed = after_start(proc.pid)
        assert proc.pid in named("sglang", changed)
        assert proc.pid in named("sglang", changed, venv_v)


def test_interpreter_known_by_its_binary_when_argv0_is_renamed(standin, venv_v):
    with running(["my-server", "-m", "sglang.launch_server"], standin, executable=venv_v / "bin/python") as proc:
        assert proc.pid in named("sglang", after_start(proc.pid))


def test_python_process_that_only_mentions_the_project_is_not_named(standin, venv_v):
    code = 'import sys; print("ready", flush=True); sys.stdin.read()'
    mentions = ["sglang", "/models/sglang/config.json", "/opt/sglang.py", "-mvllm", "-m", "sglangx"]
    with running([venv_v / "bin/python", "-c", code, *mentions], standin) as proc:
        assert proc.pid not in named("sglang", after_start(proc.pid))


def test_non_python_process_whose_argv_runs_the_project_is_not_named(standin):
    # sh runs a shell script that sits where a module of the project would: sh .../sglang/serve.py
    script = standin / "sglang" / "serve.py"
    script.write_text("echo ready; read line\n")
    argv = ["sh", str(script)]
    with running(argv, standin) as proc:
        changed = after_start(proc.pid)
        seen = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        assert runs_project(seen, "sglang")  # only the interpreter check leaves it out
        assert proc.pid not in named("sglang", changed)


def test_this_process_is_never_named(standin, venv_v):
    package_parent = Path(patchkit.__file__).resolve().parent.parent  # the patchkit under test
    env = {"PYTHONPATH": f"{standin}{os.pathsep}{package_parent}"}
    with running([venv_v / "bin/python", "-m", "sglang.launch_server"], standin) as sibling:
        child = subprocess.run(
            [venv_v / "bin/python", "-m", "sglang.selfcheck"],
            env={**os.environ, **env},
            capture_output=True,
            check=True,
        )
    # The child runs `python -m sglang.selfcheck` and started before the time it asked about:
    # it would be named like its sibling if it did not leave itself out.
    report = json.loads(child.stdout)
    assert sibling.pid in report["named"]
    assert report["self"] not in report["named"]


def test_parse_start_ticks_counts_fields_after_the_last_paren():
    fields = " ".join(str(n) for n in range(4, 53))  # field n holds n
    assert parse_start_ticks(f"4242 (a) (b c) R {fields}\n") == 22
    assert parse_start_ticks(f"4242 ()) S {fields}") == 22
    assert 0 <= parse_start_ticks(Path("/proc/self/stat").read_text())
    with pytest.raises(ValueError):
        parse_start_ticks("4242 no parenthesis R 1 2 3")
    with pytest.raises(ValueError):
        parse_start_ticks("4242 (python) R 1 2 3")  # truncated


def test_restart_lines_wording():
    one = Process(1234, "/v/bin/python -m sglang.launch_server --port 30000", 0)
    two = Process(1240, "/v/bin/vllm serve", 0)
    assert restart_lines([]) == []
    assert restart_lines([one]) == [
        "1 running process started before the change and may still run the old code; restart it to load the change:",
        "  pid 1234: /v/bin/python -m sglang.launch_server --port 30000",
    ]
    assert restart_lines([one, two]) == [
        "2 running processes started before the change and may still run the old code; restart them to load the change:",
        "  pid 1234: /v/bin/python -m sglang.launch_server --port 30000",
        "  pid 1240: /v/bin/vllm serve",
    ]


def test_no_proc_gives_nothing(standin, venv_v, tmp_path, monkeypatch):
    with running([venv_v / "bin/python", "-m", "sglang.launch_server"], standin) as proc:
        changed = after_start(proc.pid)
        assert proc.pid in named("sglang", changed)
        monkeypatch.setattr(processes, "PROC", tmp_path / "missing")
        assert stale_processes("sglang", changed, None) == []


def fake_proc(root: Path, pid: str, stat: str | None, argv: list[str] | None, exe: str = "/usr/bin/python3") -> None:
    folder = root / pid
    folder.mkdir(parents=True)
    if stat is not None:
        (folder / "stat").write_text(stat)
    if argv is not None:
        (folder / "cmdline").write_bytes(b"".join(os.fsencode(a) + b"\0" for a in argv))
    (folder / "exe").symlink_to(exe)


def test_entries_that_vanished_or_cannot_be_read_are_skipped(tmp_path, monkeypatch):
    stat = "{} (python3) S " + " ".join("5" for _ in range(4, 53))  # started at tick 5 after boot
    server = ["python3", "-m", "sglang.launch_server", "--name", "a\tb\n"]
    fake_proc(tmp_path, "self", stat.format(1), ["pytest"])
    fake_proc(tmp_path, "100", stat.format(100), server)
    fake_proc(tmp_path, "101", stat.format(101), None)  # exited between listing and reading
    fake_proc(tmp_path, "102", "garbage", server)
    fake_proc(tmp_path, "103", None, server)
    fake_proc(tmp_path, "104", stat.format(104), [])  # a zombie: empty cmdline
    fake_proc(tmp_path, "105", stat.format(105), ["sleep", "-m", "sglang"], exe="/usr/bin/sleep")
    (tmp_path / "not-a-pid").mkdir()
    monkeypatch.setattr(processes, "PROC", tmp_path)
    procs = stale_processes("sglang", time.time_ns(), None)
    assert [(p.pid, p.cmdline) for p in procs] == [(100, "python3 -m sglang.launch_server --name a\\tb\\n")]
    (tmp_path / "self/stat").unlink()  # not a procfs
    assert stale_processes("sglang", time.time_ns(), None) == []


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["python", "-m", "sglang.launch_server", "--port", "1"], True),
        (["python", "-u", "-X", "dev", "-W", "ignore", "-m", "sglang"], True),
        (["python", "-OO", "-msglang.launch_server"], True),
        (["python", "/v/bin/sglang", "serve"], True),
        (["python", "/v/lib/python3.11/site-packages/sglang/launch_server.py"], True),
        (["python", "-m", "debugpy", "--listen", "5678", "-m", "sglang.launch_server"], True),
        # what runs is something else; the project is only an argument of it
        (["python", "-m", "patchkit", "generate", "--repo", "/home/me/sglang"], False),
        (["python", "tool.py", "/srv/sglang/launch_server.py"], False),
        (["python", "-c", "import sglang", "-m", "sglang"], False),
        (["python", "-X", "sglang/x.py", "tool.py"], False),
        (["python", "-m", "sglangx"], False),
        (["python"], False),
    ],
)
def test_runs_project_reads_the_interpreter_options_as_cpython_does(argv, expected):
    assert runs_project(argv, "sglang") is expected
