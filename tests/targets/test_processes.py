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
from patchkit.targets.evidence import Evidence, Why, runs_project
from patchkit.targets.processes import Package, parse_start_ticks, stale_processes
from support.procs import TICK_NS, after_start, running

SERVER = 'import sys\nprint("ready", flush=True)\nsys.stdin.read()  # until the test closes stdin or kills us\n'
SELF_CHECK = (
    "import json, os, time\n"
    "from pathlib import Path\n"
    "from patchkit.targets.processes import Package, stale_processes\n"
    "later = time.time_ns() + 60 * 10**9  # any process already running started before then\n"
    'named = [p.pid for p in stale_processes("sglang", later, Package(Path(__file__).parent))]\n'
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


def site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def installed(venv: Path) -> Package:
    """The package sglang as installed in ``venv`` (no such folder: the interpreter decides)."""
    return Package(site(venv) / "sglang", venv)


def named(project: str, changed_ns: int, package: Package) -> dict[int, Evidence]:
    return {p.pid: p.why for p in stale_processes(project, changed_ns, package)}


def test_process_started_before_the_change_is_named_with_pid_and_cmdline(standin, venv_v):
    before = time.time_ns()
    with running([venv_v / "bin/python", "-m", "sglang.launch_server", "--port", "1"], standin) as proc:
        changed = after_start(proc.pid)
        procs = stale_processes("sglang", changed, Package(standin / "sglang"))
        found = {p.pid: p for p in procs}
        assert found[proc.pid].cmdline == f"{venv_v}/bin/python -m sglang.launch_server --port 1"
        assert found[proc.pid].why == Evidence(Why.PYTHONPATH, str(standin))
        assert before - TICK_NS < found[proc.pid].started_ns <= changed
        assert [p.pid for p in procs] == sorted(found)
        assert os.getpid() not in found


def test_process_started_after_the_change_is_not_named(standin, venv_v):
    changed = time.time_ns()
    with running([venv_v / "bin/python", "-m", "sglang.launch_server"], standin) as proc:
        assert proc.pid not in named("sglang", changed, Package(standin / "sglang"))
        assert proc.pid in named("sglang", after_start(proc.pid), Package(standin / "sglang"))  # seen once it is older


def test_process_of_another_project_is_not_named(standin, venv_v):
    with running([venv_v / "bin/python", "-m", "vllm.entrypoints.api_server"], standin) as proc:
        changed = after_start(proc.pid)
        assert proc.pid not in named("sglang", changed, Package(standin / "sglang"))
        assert named("vllm", changed, Package(standin / "vllm"))[proc.pid] == Evidence(Why.PYTHONPATH, str(standin))


def test_interpreter_prefix_selects_the_environment(standin, venv_v, venv_w):
    with running([venv_v / "bin/python", "-m", "sglang.launch_server"], standin) as proc:
        changed = after_start(proc.pid)
        assert named("sglang", changed, installed(venv_v))[proc.pid] == Evidence(Why.INTERPRETER, f"{venv_v}/bin/python")
        assert proc.pid not in named("sglang", changed, installed(venv_w))
        assert proc.pid in named("sglang", changed, Package(standin / "sglang"))


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
        assert named("sglang", changed, installed(venv_v))[proc.pid] == Evidence(Why.INTERPRETER, f"{venv_v}/bin/python")
        assert proc.pid not in named("sglang", changed, installed(venv_w))


def test_system_prefix_matches_its_binary_but_not_a_venv_built_on_it(standin, venv_v, tmp_path):
    base = os.path.realpath(venv_v / "bin/python")  # the interpreter the venv was made from
    system = tmp_path / "system"
    (system / "bin").mkdir(parents=True)
    (system / "bin/python3").symlink_to(base)
    with running([base, "-m", "sglang.launch_server"], standin) as plain:
        with running([venv_v / "bin/python", "-m", "sglang.launch_server"], standin) as in_venv:
            changed = max(after_start(plain.pid), after_start(in_venv.pid))
            in_system = Package(system / "lib/python3/site-packages/sglang", system)
            assert named("sglang", changed, in_system)[plain.pid] == Evidence(Why.INTERPRETER, base)  # same binary, another name
            assert in_venv.pid not in named("sglang", changed, in_system)  # runs V's site-packages
            assert plain.pid not in named("sglang", changed, installed(venv_v))
            (system / "pyvenv.cfg").write_text("home = /nowhere\n")  # now a venv: only its bin/ counts
            assert plain.pid not in named("sglang", changed, in_system)


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
    in_package = argv[1] == f"{standin}/sglang/launch_server.py"  # a file of the package: that is the evidence
    why = Evidence(Why.SCRIPT, argv[1]) if in_package else Evidence(Why.PYTHONPATH, str(standin))
    with running(argv, standin) as proc:
        changed = after_start(proc.pid)
        assert named("sglang", changed, Package(standin / "sglang"))[proc.pid] == why
        assert proc.pid in named("sglang", changed, installed(venv_v))


def test_interpreter_known_by_its_binary_when_argv0_is_renamed(standin, venv_v):
    with running(["my-server", "-m", "sglang.launch_server"], standin, executable=venv_v / "bin/python") as proc:
        assert named("sglang", after_start(proc.pid), Package(standin / "sglang"))[proc.pid] == Evidence(
            Why.PYTHONPATH, str(standin))


def test_python_process_that_only_mentions_the_project_is_not_named(standin, venv_v):
    code = 'import sys; print("ready", flush=True); sys.stdin.read()'
    mentions = ["sglang", "/models/sglang/config.json", "/opt/sglang.py", "-mvllm", "-m", "sglangx"]
    with running([venv_v / "bin/python", "-c", code, *mentions], standin) as proc:
        assert proc.pid not in named("sglang", after_start(proc.pid), Package(standin / "sglang"))


def test_non_python_process_whose_argv_runs_the_project_is_not_named(standin):
    # sh runs a shell script that sits where a module of the project would: sh .../sglang/serve.py
    script = standin / "sglang" / "serve.py"
    script.write_text("echo ready; read line\n")
    argv = ["sh", str(script)]
    with running(argv, standin) as proc:
        changed = after_start(proc.pid)
        seen = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        assert runs_project(seen, "sglang")  # only the interpreter check leaves it out
        assert proc.pid not in named("sglang", changed, Package(standin / "sglang"))


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


def test_no_proc_gives_nothing(standin, venv_v, tmp_path, monkeypatch):
    with running([venv_v / "bin/python", "-m", "sglang.launch_server"], standin) as proc:
        changed = after_start(proc.pid)
        assert proc.pid in named("sglang", changed, Package(standin / "sglang"))
        monkeypatch.setattr(processes, "PROC", tmp_path / "missing")
        assert stale_processes("sglang", changed, Package(standin / "sglang")) == []


def fake_proc(root: Path, pid: str, stat: str | None, argv: list[str] | None, exe: str = "/usr/bin/python3",
              cwd: Path | None = None, environ: bytes | None = None) -> None:
    """An entry of a /proc-like tree: what a real /proc shows of a process, each file left out
    where a process that exited (or another user's) gives an error."""
    folder = root / pid
    folder.mkdir(parents=True)
    if stat is not None:
        (folder / "stat").write_text(stat)
    if argv is not None:
        (folder / "cmdline").write_bytes(b"".join(os.fsencode(a) + b"\0" for a in argv))
    (folder / "exe").symlink_to(exe)
    if cwd is not None:
        (folder / "cwd").symlink_to(cwd)
    if environ is not None:
        (folder / "environ").write_bytes(environ)


STAT = "{} (python3) S " + " ".join("5" for _ in range(4, 53))  # started at tick 5 after boot
SERVER_ARGV = ["python3", "-m", "sglang.launch_server"]


def test_entries_that_vanished_or_cannot_be_read_are_skipped(tmp_path, monkeypatch):
    server = SERVER_ARGV + ["--name", "a\tb\n"]
    checkout = tmp_path / "checkout"
    (checkout / "python/sglang").mkdir(parents=True)
    fake_proc(tmp_path, "self", STAT.format(1), ["pytest"])
    fake_proc(tmp_path, "100", STAT.format(100), server, cwd=checkout / "python", environ=b"PATH=/nowhere\0")
    fake_proc(tmp_path, "101", STAT.format(101), None)  # exited between listing and reading
    fake_proc(tmp_path, "102", "garbage", server)
    fake_proc(tmp_path, "103", None, server)
    fake_proc(tmp_path, "104", STAT.format(104), [])  # a zombie: empty cmdline
    fake_proc(tmp_path, "105", STAT.format(105), ["sleep", "-m", "sglang"], exe="/usr/bin/sleep")
    fake_proc(tmp_path, "106", STAT.format(106), server)  # no cwd, no environ: exited while read
    fake_proc(tmp_path, "107", STAT.format(107).replace(" S ", " Z "), server, cwd=checkout / "python", environ=b"")
    (tmp_path / "not-a-pid").mkdir()
    monkeypatch.setattr(processes, "PROC", tmp_path)
    package = Package(checkout / "python/sglang")
    procs = stale_processes("sglang", time.time_ns(), package)
    assert [(p.pid, p.cmdline) for p in procs] == [(100, "python3 -m sglang.launch_server --name a\\tb\\n")]
    assert procs[0].why == Evidence(Why.CWD, str(checkout / "python"))
    (tmp_path / "self/stat").unlink()  # not a procfs
    assert stale_processes("sglang", time.time_ns(), package) == []


def test_what_proc_shows_is_the_evidence_and_what_it_hides_is_said(tmp_path, monkeypatch):
    """Each process runs `python3 -m sglang.launch_server` (but one); the package is
    checkout/python/sglang.  Read from a /proc-like tree, as another user's processes or
    oversized ones would show."""
    proc, checkout, elsewhere = tmp_path / "proc", tmp_path / "checkout", tmp_path / "elsewhere"
    (checkout / "python/sglang").mkdir(parents=True)
    elsewhere.mkdir()
    fake_proc(proc, "self", STAT.format(1), ["pytest"])

    def env(**values: str) -> bytes:
        return b"".join(f"{k}={v}".encode() + b"\0" for k, v in {"PATH": "/nowhere", **values}.items())

    long_arg = "x" * processes.CMDLINE_CAP
    cases = {
        200: (SERVER_ARGV, checkout / "python", env()),
        201: (SERVER_ARGV, checkout, env(PYTHONPATH=f"/nowhere{os.pathsep}python")),  # relative: from the cwd
        202: (SERVER_ARGV, elsewhere, None),  # environ unreadable (below: a folder)
        203: (SERVER_ARGV, elsewhere, env(BIG="y" * processes.ENVIRON_CAP)),
        204: (["python3", "-E", "-m", "sglang.launch_server"], elsewhere, env(PYTHONPATH=f"{checkout}/python")),
        205: (["python3", "-Im", "sglang.launch_server"], checkout / "python", env()),
        206: (["python3", "-P", "-m", "sglang"], checkout / "python", env()),
        207: (SERVER_ARGV, checkout / "python", env(PYTHONSAFEPATH="1")),
        208: (SERVER_ARGV, checkout / "python", env(PYTHONSAFEPATH="1", PYTHONPATH=str(checkout / "python"))),
        209: (SERVER_ARGV + ["--name", long_arg, "--port", "1"], elsewhere, env(PYTHONPATH=str(checkout / "python"))),
        210: (["python3", str(checkout / "python/sglang/launch_server.py")], elsewhere, env()),
        211: (["python3", "-c", "import sglang", "-m", "sglang"], checkout / "python", env()),
    }
    for pid, (argv, cwd, environ) in cases.items():
        fake_proc(proc, str(pid), STAT.format(pid), argv, cwd=cwd, environ=environ)
    (proc / "202/environ").mkdir()  # read(2) fails, as for another user's process (EACCES: the next test)
    monkeypatch.setattr(processes, "PROC", proc)
    found = {p.pid: p for p in stale_processes("sglang", time.time_ns(), Package(checkout / "python/sglang"))}
    assert {pid: p.why for pid, p in found.items()} == {
        200: Evidence(Why.CWD, str(checkout / "python")),
        201: Evidence(Why.PYTHONPATH, str(checkout / "python")),
        202: Evidence(Why.UNREADABLE, f"{proc}/202/environ", "Is a directory"),
        203: Evidence(Why.TOO_LARGE, f"{proc}/203/environ", str(processes.ENVIRON_CAP)),
        208: Evidence(Why.PYTHONPATH, str(checkout / "python")),  # PYTHONSAFEPATH leaves out the cwd only
        209: Evidence(Why.PYTHONPATH, str(checkout / "python")),
        210: Evidence(Why.SCRIPT, str(checkout / "python/sglang/launch_server.py")),
    }  # 204: -E ignores PYTHONPATH; 205 (-I), 206 (-P), 207: no cwd first; 211: -c runs code
    assert found[209].cmdline == "python3 -m sglang.launch_server --name ..."  # cut at the cap, whole arguments only
    assert found[200].cmdline == "python3 -m sglang.launch_server"


def seen_as(uid: int, package: Package, changed_ns: int) -> dict[int, Evidence]:
    """What stale_processes finds when run as another user: in a child forked from this process
    (patchkit is imported already; the child never returns into pytest), its uid set to ``uid``."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(read)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            found = [[p.pid, p.why.reason.value, p.why.path, p.why.detail] for p in stale_processes("sglang", changed_ns, package)]
            os.write(write, json.dumps(found).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        found = json.loads(pipe.read() or b"null")
    os.waitpid(child, 0)
    assert found is not None, "the child as another user did not answer"
    return {pid: Evidence(Why(reason), path, detail) for pid, reason, path, detail in found}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: to read /proc as another user, and to become one")
def test_another_users_server_is_named_as_one_patchkit_cannot_tell_about(standin, venv_v):
    """Another user's process shows its command line and start, not its environment, current
    folder or executable (EACCES): named, saying that patchkit cannot tell, never left out silently."""
    with running([venv_v / "bin/python", "-m", "sglang.launch_server"], standin) as proc:
        changed = after_start(proc.pid)
        assert named("sglang", changed, Package(standin / "sglang"))[proc.pid] == Evidence(Why.PYTHONPATH, str(standin))
        nobody = seen_as(65534, Package(standin / "sglang"), changed)
        assert nobody[proc.pid] == Evidence(Why.UNREADABLE, f"/proc/{proc.pid}/exe", "Permission denied")


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
