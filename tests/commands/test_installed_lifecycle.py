"""An installed SGLang through the life of a real virtualenv: upgrade, downgrade with
--force-reinstall, uninstall and install again, with patchkit applied before each step.

Real wheels from PyPI (cached, see ``support.mirror``), installed by pip into a real
virtualenv (each test starts from a copy of conftest's ``sglang_venv``, 0.5.9 installed by
pip; every later install, upgrade and uninstall is pip's own).  After each step ``apply``
patches the release that is installed now, ``verify`` accepts it, ``revert`` restores that
release's exact wheel bytes, and ``revert --force`` never writes another release's bytes.
patchkit runs in this process (support.cli.invoke) with ``--python``, as a user gives it.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from patchkit.fixes.registry import SGLANG
from patchkit.rewrite.evaluate import tables
from support.cli import invoke
from support.mirror import default_cache, fetch_wheel
from support.procs import after_start, running
from support.venvs import copy_venv, pip_command

DC = "sglang/srt/distributed/device_communicators"
FILES = (f"{DC}/all_reduce_utils.py", f"{DC}/torch_symm_mem.py")
# The shipped series apply writes by default: 0.5.9's has the DeepGEMM fix (on by default) first; 0.5.23
# has that fix upstream (0.5.21's probe of the SM12x APIs), its series is the tables alone.
SHIPPED = {
    "0.5.9": "patches/0.5.9/0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-their.patch + "
             "patches/0.5.9/0002-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch",
    "0.5.23": "patches/0.5.23/0001-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch",
}


def wheel_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {name: zf.read(name) for name in FILES}


class Env:
    """A virtualenv with SGLang 0.5.9 installed by pip, pip driven from outside (pip --python),
    patchkit run with --python as a user runs it."""

    def __init__(self, template: Path, root: Path) -> None:
        copy_venv(template, root)
        self.root = root
        self.python = str(root / "bin" / "python")
        self.site = next((root / "lib").glob("python3*/site-packages"))

    def pip(self, *args: str) -> None:
        options = ["--no-deps", "--no-index", "--no-compile"] if args[0] == "install" else []
        cmd = pip_command(self.python, *args, "-q", *options)
        subprocess.run(cmd, check=True, capture_output=True)

    def pk(self, command: str, *args: str) -> subprocess.CompletedProcess:
        return invoke(command, "--python", self.python, *args)

    def files(self) -> dict[str, bytes]:
        return {rel: (self.site / rel).read_bytes() for rel in FILES}

    def first_line(self, version: str) -> str:
        return f"{self.site / 'sglang'}: SGLang {version} (installed), from sglang-{version}.dist-info"


def lines(done: subprocess.CompletedProcess) -> list[str]:
    return done.stdout.decode().splitlines()


def assert_patched(env: Env, wheel: dict[str, bytes]) -> None:
    """Every table copies key 10 to key 12, and only lines were added to the wheel's files."""
    for rel, data in env.files().items():
        found = tables(data, SGLANG.tables, rel)
        assert found and all(t[12] == t[10] for t in found.values()), rel
        diff = difflib.SequenceMatcher(a=wheel[rel].splitlines(), b=data.splitlines(), autojunk=False)
        assert {tag for tag, *_ in diff.get_opcodes()} == {"equal", "insert"}, rel


# The default fixes by name: with no GPU seen a plain apply leaves torch-symm-mem out of 0.5.23 (it only
# warns without it, and no SM12x GPU has multicast); this test is about the state across releases.
DEFAULTS = ("--fix", "deepgemm-sm12x", "--fix", "fusion-self-enable", "--fix", "torch-symm-mem")


def apply_verify_revert(env: Env, version: str, wheel: dict[str, bytes], aside_line: str | None) -> None:
    done = env.pk("apply", *DEFAULTS)
    assert done.returncode == 0, done.stderr.decode()
    out = lines(done)
    assert out[0] == env.first_line(version)
    if aside_line:
        assert out[1].startswith(f"{aside_line}: the old state is set aside in {env.site}/.patchkit-sglang/aside/"), out
        assert out[2] == f"applied shipped patch {SHIPPED[version]}"
    else:
        assert out[1] == f"applied shipped patch {SHIPPED[version]}"
    assert_patched(env, wheel)
    assert env.pk("verify").returncode == 0
    assert env.pk("revert").returncode == 0
    assert env.files() == wheel
    assert env.pk("apply", *DEFAULTS).returncode == 0  # leave it patched for the next step


def test_upgrade_downgrade_uninstall_install(sglang_venv: Path, tmp_path: Path) -> None:
    cache = default_cache()
    old_wheel, new_wheel = fetch_wheel("0.5.9", cache), fetch_wheel("0.5.23", cache)
    old, new = wheel_files(old_wheel), wheel_files(new_wheel)
    assert old != new
    env = Env(sglang_venv, tmp_path / "V")  # 0.5.9 installed
    assert env.files() == old

    apply_verify_revert(env, "0.5.9", old, None)

    # An upgrade under the patch: the state is 0.5.9's.
    env.pip("install", str(new_wheel))
    assert env.files() == new
    status = env.pk("status")
    assert status.returncode == 0
    assert "applied:  nothing for this release; sglang 0.5.9 was patched; 0.5.23 is installed now: that state no longer applies (the next apply or revert sets it aside)" in lines(status)
    verify = env.pk("verify")
    assert verify.returncode == 1  # 0.5.23 is not patched, and says why
    assert "note: sglang 0.5.9 was patched; 0.5.23 is installed now: that state no longer applies (the next apply or revert sets it aside)" in lines(verify)
    # doctor agrees: 0.5.23 holds deepgemm-sm12x itself; the state that says patchkit applied it is 0.5.9's.
    doctor = lines(env.pk("doctor", "--to-cc", "12.0"))
    assert "  deepgemm-sm12x (on by default): in effect (the release has it)" in doctor, doctor
    assert not any("applied (by patchkit)" in line for line in doctor), doctor
    refusal = (
        f"{env.site}/.patchkit-sglang/state.json: sglang 0.5.9 was patched; 0.5.23 is installed now: "
        "--force would write the originals recorded then into the files of the release here now; refused, nothing "
        "written (`patchkit revert` without --force sets the old state aside)"
    )
    state = (env.site / ".patchkit-sglang/state.json").read_bytes()
    forced = env.pk("revert", "--force")
    assert (forced.returncode, forced.stdout, forced.stderr.decode()) == (3, b"", f"patchkit: {refusal}\n")
    forced = env.pk("revert", "--force", "--json")  # the same refusal as an error document
    assert forced.returncode == 3
    assert json.loads(forced.stdout) == {"schema": 2, "command": "revert", "ok": False, "exit_code": 3, "error": refusal,
                                         "path": f"{env.site}/.patchkit-sglang/state.json"}
    assert env.files() == new
    assert (env.site / ".patchkit-sglang/state.json").read_bytes() == state  # refused: nothing moved either
    assert not (env.site / ".patchkit-sglang/aside").exists()
    apply_verify_revert(env, "0.5.23", new, "sglang 0.5.9 was patched; 0.5.23 is installed now")

    # A downgrade with --force-reinstall: 0.5.23's state is set aside, never written into 0.5.9.
    env.pip("install", "--force-reinstall", str(old_wheel))
    assert env.files() == old
    assert env.pk("revert", "--force").returncode == 3
    assert env.files() == old
    apply_verify_revert(env, "0.5.9", old, "sglang 0.5.23 was patched; 0.5.9 is installed now")

    # Uninstall leaves the state dir behind; it does not block the next install.
    env.pip("uninstall", "-y", "sglang")
    gone = env.pk("status")
    assert gone.returncode == 2 and b"sglang or vllm or flashinfer is not installed for this interpreter" in gone.stderr and len(gone.stderr.splitlines()) == 1
    env.pip("install", str(old_wheel))
    assert env.files() == old
    status = env.pk("status")
    assert "applied:  nothing for this release; sglang 0.5.9 was patched; its files were reinstalled since (they are the originals again): that state no longer applies (the next apply or revert sets it aside)" in lines(status)
    apply_verify_revert(env, "0.5.9", old, "sglang 0.5.9 was patched; its files were reinstalled since (they are the originals again)")

    # Every state set aside is kept, with its originals: nothing recorded was deleted.
    aside = sorted((env.site / ".patchkit-sglang/aside").glob("*/state.json"))
    assert [json.loads(p.read_bytes())["version"] for p in aside] == ["0.5.9", "0.5.23", "0.5.9"]
    for state in aside:
        for f in json.loads(state.read_bytes())["files"]:
            assert (state.parent / "objects" / f["pre_sha256"]).is_file()
    assert env.pk("revert").returncode == 0
    assert env.files() == old


def test_a_key_12_put_there_by_hand_is_left_alone(sglang_venv: Path, tmp_path: Path) -> None:
    """A key 12 with other values than key 10 (tuned by hand, or upstream): verify accepts
    it and says so, apply writes nothing, and `verify || apply` ends accepted.  The tables' fix alone
    (--fix torch-symm-mem): the DeepGEMM fix, on by default, would patch 0.5.9's configurer.py."""
    env = Env(sglang_venv, tmp_path / "V")
    utils, comm = (env.site / rel for rel in FILES)
    utils.write_bytes(utils.read_bytes().replace(b"    10: {\n", b"    12: {\n        8: 256 * MiB,\n    },\n    10: {\n", 1))
    comm.write_bytes(comm.read_bytes().replace(b"        10: [6, 8],\n", b"        10: [6, 8],\n        12: [6, 8],\n", 1))
    edited = env.files()
    done = env.pk("verify", "--fix", "torch-symm-mem")
    assert done.returncode == 0, done.stdout.decode()
    out = lines(done)
    assert f"note: {FILES[0]}: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES has a key 12 that patchkit did not add, left as it is: " \
        "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[12] = {8: 268435456} differs from TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[10] = " \
        "{2: 67108864, 4: 67108864, 6: 134217728, 8: 134217728}" in out
    assert f"note: {FILES[1]}: TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM already has key 12, not added by patchkit (equal to key 10)" in out
    assert out[-1] == "verify: ok (key 12 = key 10 in every table patchkit added)"
    done = env.pk("apply", "--fix", "torch-symm-mem")
    assert done.returncode == 0
    assert lines(done)[-1] == "already upstream (generated from the installed files): nothing written"
    assert env.files() == edited
    assert invoke("verify", str(env.site), "--fix", "torch-symm-mem").returncode == 0

    assert not (env.site / ".patchkit-sglang").exists()  # nothing was written, not even a state dir

    # Only one table has it (in a fresh install of the wheel): apply patches the other one, verify accepts both.
    env = Env(sglang_venv, tmp_path / "W")
    (env.site / FILES[0]).write_bytes(edited[FILES[0]])
    done = subprocess.run(["sh", "-c", f"{sys.executable} -m patchkit verify --python {env.python} || {sys.executable} -m patchkit apply --python {env.python}"], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    assert env.files()[FILES[0]] == edited[FILES[0]]
    assert tables(env.files()[FILES[1]], SGLANG.tables, FILES[1])["TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM"][12] == [6, 8]
    assert env.pk("verify").returncode == 0


@pytest.mark.servers
def test_servers_started_before_the_change_are_named(sglang_venv: Path, tmp_path: Path) -> None:
    """A Python of the venv running `-m sglang.launch_server` (a stand-in that waits) before
    apply is named after apply, in status and after revert; one started after is not."""
    env = Env(sglang_venv, tmp_path / "V")
    standin = tmp_path / "standin"
    (standin / "sglang").mkdir(parents=True)
    (standin / "sglang/__init__.py").write_text("")
    (standin / "sglang/launch_server.py").write_text('import sys\nprint("ready", flush=True)\nsys.stdin.read()\n')
    server = [env.python, "-m", "sglang.launch_server", "--port", "30000"]
    with running(server, standin) as old:
        after_start(old.pid)
        done = env.pk("apply")
        assert done.returncode == 0
        out = lines(done)
        line = f"  pid {old.pid}: {env.python} -m sglang.launch_server --port 30000"
        assert line in out, out
        header = out[out.index(line) - 1]  # other servers on this machine may be listed too
        assert header.startswith(("    because ", "    patchkit cannot tell ", "1 running process started before the change")), out
        because = f"    because it runs {env.python}, a Python of the environment the package is installed in"
        assert out[out.index(line) + 1] == because
        assert any(h.endswith("may still run the old code; restart it to load the change:")
                   or h.endswith("may still run the old code; restart them to load the change:") for h in out)
        with running(server, standin) as new:
            for command in ("status", "apply"):
                out = lines(env.pk(command))
                assert f"  pid {old.pid}: {env.python} -m sglang.launch_server --port 30000" in out, (command, out)
                assert not any(line.startswith(f"  pid {new.pid}:") for line in out), (command, out)
            [doc] = json.loads(env.pk("status", "--json").stdout)["targets"]
            assert old.pid in [p["pid"] for p in doc["restart"]] and new.pid not in [p["pid"] for p in doc["restart"]]
            (entry,) = [p for p in doc["restart"] if p["pid"] == old.pid]
            assert (entry["reason"], entry["evidence"], entry["why"]) == ("interpreter", str(env.python), because.strip())
            after_start(new.pid)
            out = lines(env.pk("revert"))
            assert f"  pid {old.pid}: {env.python} -m sglang.launch_server --port 30000" in out
            assert f"  pid {new.pid}: {env.python} -m sglang.launch_server --port 30000" in out  # started before the revert


def test_one_round_of_verify_or_apply_after_a_hand_edit_of_one_table(sglang_venv: Path, tmp_path: Path) -> None:
    """A key 12 added by hand to one table file (its bytecode, compiled before, now stale):
    the one apply of `verify || apply` patches the other file and drops the edited file's
    stale bytecode too, so verify passes at once.  Notes name the files the installed way."""
    import py_compile

    env = Env(sglang_venv, tmp_path / "V")
    utils, comm = (env.site / rel for rel in FILES)
    for path in (utils, comm):
        py_compile.compile(str(path), doraise=True)  # the bytecode pip compiles at install
    utils.write_bytes(utils.read_bytes().replace(b"    10: {\n", b"    12: {\n        8: 256 * MiB,\n    },\n    10: {\n", 1))
    stale = next((utils.parent / "__pycache__").glob("all_reduce_utils.*.pyc"))
    assert env.pk("verify").returncode == 1
    done = env.pk("apply")
    assert done.returncode == 0, done.stderr.decode()
    out = lines(done)
    assert f"note: files differ from the pre-image of {SHIPPED['0.5.9']} (local edits?): {FILES[0]}" in out
    assert "applied generated from the installed files" in out
    assert f"  patched {FILES[1]} (+1 line)" in out
    assert "dropped 2 cached bytecode files" in out  # the patched file's and the edited file's
    assert not stale.exists()
    done = env.pk("verify")
    assert done.returncode == 0, done.stdout.decode()
    assert lines(done)[-1] == "verify: ok (key 12 = key 10 in every table patchkit added)"
    assert b"the checkout" not in done.stdout + done.stderr
