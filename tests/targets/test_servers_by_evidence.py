"""apply and revert name a server only when it runs the target's own files, and say why.

Two checkouts of the same release, A and B, each with a stand-in ``sglang/launch_server.py``
(untracked) in its package folder.  A server started with A's ``python/`` folder on its
PYTHONPATH, or in that folder, imports A's files: ``patchkit apply A`` names it with that
evidence, ``patchkit apply B`` does not name it.  Stand-ins of other tests running at the same
time hold neither checkout on their path, so the exact lines hold under ``pytest -n``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import invoke
from support.procs import after_start, running
from support.repos import git, make_repo

SERVER = 'import sys\nprint("ready", flush=True)\nsys.stdin.read()  # until the test closes stdin or kills us\n'

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc"),
    pytest.mark.servers,  # stand-in servers: see the marker in pyproject.toml
]


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("origin") / "sglang")


def checkout(origin: Path, dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(origin), str(dest)], check=True, capture_output=True)
    git(dest, "checkout", "-q", "v0.5.5")
    (dest / "python/sglang/launch_server.py").write_text(SERVER)
    return dest


def lines(done: subprocess.CompletedProcess) -> list[str]:
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().splitlines()


def restarts(doc) -> list[dict]:
    """Every entry of a ``restart`` list anywhere in a --json document."""
    if isinstance(doc, dict):
        return [e for k, v in doc.items() for e in (v if k == "restart" else restarts(v))]
    return [e for v in doc for e in restarts(v)] if isinstance(doc, list) else []


@pytest.mark.parametrize("how", ["pythonpath", "cwd"])
def test_a_server_of_checkout_a_is_named_by_apply_a_and_not_by_apply_b(origin: Path, tmp_path: Path, how: str) -> None:
    a, b = checkout(origin, tmp_path / "a"), checkout(origin, tmp_path / "b")
    argv = [sys.executable, "-m", "sglang.launch_server", "--port", "30000"]
    if how == "pythonpath":
        server, because = running(argv, a / "python"), f"    because its PYTHONPATH has {a}/python"
    else:
        server = running(argv, None, cwd=a / "python")
        because = f"    because its current folder is {a}/python, the first place python -m and -c import from"
    with server as proc:
        after_start(proc.pid)
        pid = f"  pid {proc.pid}: {sys.executable} -m sglang.launch_server --port 30000"

        out = lines(invoke("apply", str(b)))
        assert any(line.startswith("applied generated") for line in out), out
        assert not any(line.startswith(f"  pid {proc.pid}:") for line in out), out
        assert [e for e in restarts(json.loads(invoke("revert", str(b), "--json").stdout)) if e["pid"] == proc.pid] == []

        out = lines(invoke("apply", str(a)))
        assert any(line.startswith("applied generated") for line in out), out
        assert out[out.index(pid) + 1] == because
        assert any(line.endswith("may still run the old code; restart it to load the change:")
                   or line.endswith("may still run the old code; restart them to load the change:") for line in out)

        out = lines(invoke("revert", str(a)))
        assert out[out.index(pid) + 1] == because

        doc = json.loads(invoke("apply", str(a), "--json").stdout)
        (entry,) = [e for e in restarts(doc) if e["pid"] == proc.pid]
        assert entry["cmdline"] == pid.split(": ", 1)[1]
        assert (entry["reason"], entry["evidence"], entry["why"]) == (how, f"{a}/python", because.strip())

        out = lines(invoke("apply", str(b)))
        assert any(line.startswith("applied generated") for line in out), out
        assert not any(line.startswith(f"  pid {proc.pid}:") for line in out), out
