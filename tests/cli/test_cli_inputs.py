"""Every wrong input: one clean line, the documented exit code (2), nothing written, no traceback.

With --json a failure also prints an error document on stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from patchkit.cli import cli
from patchkit.versions import is_version
from support.cli import invoke, run_cli
from support.repos import make_repo

PROBLEMS, BAD_INPUT, REFUSED = 1, 2, 3


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SGLang checkout (v0.5.16 at HEAD) that no test here may change."""
    return make_repo(tmp_path_factory.mktemp("inputs") / "sglang")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file below ``root``, .git included (refs, index, state)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def one_line(done: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """The failure said in exactly one stderr line ``patchkit: ...``; no traceback."""
    err = done.stderr.decode()
    assert done.returncode == code, (done.returncode, err)
    assert b"Traceback" not in done.stdout + done.stderr, err
    assert err.startswith("patchkit: ") and err.endswith("\n") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def refused(checkout: Path, *args: str, needle: str, json_doc: bool = False) -> None:
    """``args`` fail with exit 2 and one line holding ``needle``, and change nothing."""
    before = snapshot(checkout)
    done = invoke(*args, *(["--json"] if json_doc else []))
    err = one_line(done, BAD_INPUT, needle)
    if json_doc:
        doc = json.loads(done.stdout)
        assert doc == {"schema": 2, "command": args[0], "ok": False, "exit_code": BAD_INPUT, "error": err[len("patchkit: ") : -1],
                       "path": doc["path"]}
    else:
        assert done.stdout == b""
    assert snapshot(checkout) == before


# -- 1. --out that is not a folder (generate, upstream), through the error boundary -----------------

OUT_CASES = [("generate", []), ("generate", ["--check"]), ("generate", ["--json"]), ("upstream", []), ("upstream", ["--json"])]


@pytest.mark.parametrize("below", ["", "sub"], ids=["a file", "below a file"])
@pytest.mark.parametrize(("command", "extra"), OUT_CASES, ids=[" ".join([c, *e]) for c, e in OUT_CASES])
def test_out_not_a_directory(checkout: Path, tmp_path: Path, below: str, command: str, extra: list[str]) -> None:
    file = tmp_path / "afile"
    file.write_bytes(b"keep\n")
    out = file / below if below else file
    before = snapshot(checkout)
    target = ["--repo", str(checkout)] if command == "generate" else [str(checkout)]
    done = invoke(command, *target, "--out", str(out), *extra)
    reason = "not a directory" if out == file else f"{file} is not a directory"
    err = one_line(done, BAD_INPUT, f"patchkit: {out}: {reason}")
    if "--json" in extra:
        assert json.loads(done.stdout) == {
            "schema": 2, "command": command, "ok": False, "exit_code": BAD_INPUT, "error": err[len("patchkit: ") : -1], "path": str(out),
        }
    else:
        assert done.stdout == b""
    assert file.read_bytes() == b"keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    assert snapshot(checkout) == before  # upstream made no branch


@pytest.mark.parametrize("as_json", [False, True], ids=["lines", "json"])
def test_generate_oserror_is_one_line(checkout: Path, tmp_path: Path, as_json: bool) -> None:
    """An OSError while writing (a version folder that is a file) is one line naming it, exit 2
    (README: an OSError is a file patchkit cannot use, as an --out that is a file)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "0.5.3").write_bytes(b"in the way\n")
    done = invoke("generate", "--repo", str(checkout), "--out", str(out), *(["--json"] if as_json else []))
    err = one_line(done, BAD_INPUT, f"patchkit: {out / '0.5.3'}: ")
    if as_json:
        doc = json.loads(done.stdout)
        assert doc == {"schema": 2, "command": "generate", "ok": False, "exit_code": BAD_INPUT, "error": err[len("patchkit: ") : -1],
                       "path": str(out / "0.5.3")}
    assert (out / "0.5.3").read_bytes() == b"in the way\n"


# -- 2. --version must be a release version ---------------------------------------------------------


@pytest.mark.parametrize("version", ["0.5.9", "0.5.4.post2", "0.5.0rc1", "1", "0.6.0a1.dev3", "0.5.10b2.post1"])
def test_release_versions(version: str) -> None:
    assert is_version(version)


@pytest.mark.parametrize("version", ["banana", "", "v0.5.9", "0.5.", ".5", "0.5.9 ", "0.5.9\n", "0.5.9-1", "0..5", "0.5.9/../x"])
def test_not_release_versions(version: str) -> None:
    assert not is_version(version)


@pytest.mark.parametrize("as_json", [False, True], ids=["lines", "json"])
def test_apply_refuses_a_version_that_is_not_one(checkout: Path, as_json: bool) -> None:
    refused(checkout, "apply", str(checkout), "--version", "banana", needle="--version 'banana' is not a release version",
            json_doc=as_json)


def test_apply_takes_a_release_version(checkout: Path) -> None:
    before = snapshot(checkout)
    done = invoke("apply", str(checkout), "--version", "0.5.4.post2", "--dry-run")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines()[0] == f"{checkout}: SGLang 0.5.4.post2, given with --version"
    assert snapshot(checkout) == before


# -- 3. the cc pair: two different capabilities ----------------------------------------------------------
# (12 with 12.0, or 10 with 12.0, is no longer refused: each project keys a cc its own way, whatever way it
# is written; tests/cli/test_cc_everywhere.py.)

SAME = "--to-cc must differ from --from-cc"
CC_CASES = [
    # (command, options, needle); PATH and --out are added by the test
    ("apply", ["--to-cc", "10"], f"{SAME} (--from-cc 10, --to-cc 10)"),
    ("apply", ["--from-cc", "12", "--to-cc", "12"], f"{SAME} (--from-cc 12, --to-cc 12)"),
    ("apply", ["--to-cc", "10.0"], f"{SAME} (--from-cc 10, --to-cc 10.0)"),
    ("apply", ["--from-cc", "12.0"], f"{SAME} (--from-cc 12.0, --to-cc 12)"),
    ("apply", ["--project", "vllm", "--to-cc", "10.0"], f"{SAME} (--from-cc 10.0, --to-cc 10.0)"),
    ("apply", ["--to-cc", "sm_100a"], f"{SAME} (--from-cc 10, --to-cc sm_100a)"),
    # one key for SGLang, which keys by major: refused once the project is known
    ("apply", ["--from-cc", "12.0", "--to-cc", "12.1"], f"{SAME} (--from-cc 12.0, --to-cc 12.1): SGLang keys both as 12"),
    ("apply", ["--to-cc", "10.3"], f"{SAME} (--from-cc 10, --to-cc 10.3): SGLang keys both as 10"),
    ("verify", ["--from-cc", "10", "--to-cc", "10"], SAME),
    ("verify", ["--to-cc", "10.0"], f"{SAME} (--from-cc 10, --to-cc 10.0)"),
    ("verify", ["--from-cc", "12.1"], f"{SAME} (--from-cc 12.1, --to-cc 12): SGLang keys both as 12"),
    ("upstream", ["--to-cc", "10"], SAME),
    ("upstream", ["--from-cc", "12"], SAME),
    ("upstream", ["--from-cc", "10.0", "--to-cc", "10"], f"{SAME} (--from-cc 10.0, --to-cc 10)"),
    ("generate", ["--to-cc", "10"], SAME),
    ("generate", ["--from-cc", "12", "--to-cc", "12.1"], f"{SAME} (--from-cc 12, --to-cc 12.1): SGLang keys both as 12"),
    ("generate", ["--project", "vllm", "--to-cc", "10"], f"{SAME} (--from-cc 10.0, --to-cc 10)"),
    # scan's --cc is its --to-cc (one option, two names): the message names --to-cc.
    ("scan", ["--cc", "10"], "--to-cc must differ from --from-cc (--from-cc 10, --to-cc 10)"),
    ("scan", ["--to-cc", "10.0", "--from-cc", "10"], "--to-cc must differ from --from-cc (--from-cc 10, --to-cc 10.0)"),
    ("scan", ["--to-cc", "12.0", "--from-cc", "12"], "--to-cc must differ from --from-cc"),
]


def _target_args(command: str, checkout: Path, tmp_path: Path) -> list[str]:
    if command == "generate":
        return ["--repo", str(checkout), "--out", str(tmp_path / "out")]
    if command == "upstream":
        return [str(checkout), "--out", str(tmp_path / "out")]
    return [str(checkout)]


@pytest.mark.parametrize(("command", "options", "needle"), CC_CASES, ids=[f"{c} {' '.join(o)}" for c, o, _ in CC_CASES])
def test_bad_cc_pair(checkout: Path, tmp_path: Path, command: str, options: list[str], needle: str) -> None:
    refused(checkout, command, *_target_args(command, checkout, tmp_path), *options, needle=needle)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["apply", "verify", "upstream", "generate", "scan"])
def test_bad_cc_pair_as_json(checkout: Path, tmp_path: Path, command: str) -> None:
    options = ["--cc", "10"] if command == "scan" else ["--from-cc", "12", "--to-cc", "12"]
    refused(checkout, command, *_target_args(command, checkout, tmp_path), *options, needle="", json_doc=True)


# The one message of every cc option of every command for a value that is no cc of an NVIDIA GPU.
NOT_NVIDIA = ("is not the compute capability of an NVIDIA GPU: NVIDIA's are 3.0 3.2 3.5 3.7 5.0 5.2 5.3 6.0 6.1 6.2 7.0 7.2 "
              "7.5 8.0 8.6 8.7 8.8 8.9 9.0 10.0 10.1 10.3 11.0 12.0 12.1, written like 12.1, 12 (for 12.0) or sm_121a")
NO_SUCH_CC = [
    # (command, options, the option and value refused): each cc option of every command, NVIDIA's ccs only
    ("apply", ["--to-cc", "99"], "--to-cc '99'"),
    ("apply", ["--to-cc", "13"], "--to-cc '13'"),
    ("apply", ["--to-cc", "12.5"], "--to-cc '12.5'"),
    ("apply", ["--to-cc", "banana"], "--to-cc 'banana'"),
    ("apply", ["--to-cc", "sm_125a"], "--to-cc 'sm_125a'"),
    ("apply", ["--to-cc", "16.0"], "--to-cc '16.0'"),
    ("apply", ["--to-cc", "12.10"], "--to-cc '12.10'"),
    ("apply", ["--from-cc", "0", "--to-cc", "12"], "--from-cc '0'"),
    ("apply", ["--from-cc", "99", "--to-cc", "auto"], "--from-cc '99'"),
    ("verify", ["--from-cc", "10", "--to-cc", "99"], "--to-cc '99'"),
    ("verify", ["--to-cc", "99"], "--to-cc '99'"),
    ("verify", ["--from-cc", "16", "--to-cc", "12"], "--from-cc '16'"),
    ("generate", ["--to-cc", "99"], "--to-cc '99'"),
    ("generate", ["--from-cc", "99", "--to-cc", "auto"], "--from-cc '99'"),
    ("upstream", ["--to-cc", "99"], "--to-cc '99'"),
    ("upstream", ["--from-cc", "0"], "--from-cc '0'"),
    ("scan", ["--cc", "99"], "--to-cc '99'"),
    ("scan", ["--from-cc", "16.0", "--cc", "12.0"], "--from-cc '16.0'"),
    ("kernels", ["--to-cc", "99"], "--to-cc '99'"),
    ("kernels", ["--to-cc", "12.0", "--to-cc", "16.0"], "--to-cc '16.0'"),
    ("doctor", ["--to-cc", "99"], "--to-cc '99'"),
    ("status", ["--to-cc", "13"], "--to-cc '13'"),
    ("revert", ["--to-cc", "12.5"], "--to-cc '12.5'"),
    ("upstream", ["--to-cc", "auto"], "--to-cc 'auto'"),  # upstream takes no auto: the same line
]


@pytest.mark.parametrize("as_json", [False, True], ids=["lines", "json"])
@pytest.mark.parametrize(("command", "options", "given"), NO_SUCH_CC, ids=[f"{c} {' '.join(o)}" for c, o, _ in NO_SUCH_CC])
def test_a_cc_nvidia_has_none_of_is_one_line(checkout: Path, tmp_path: Path, command: str, options: list[str], given: str,
                                              as_json: bool) -> None:
    """apply --to-cc 99 wrote key 99, and --to-cc 13 key 13: each command refuses such a cc, with
    --to-cc auto too, in one line while the command line is parsed, in the same words: exit 2, the
    target and --out untouched."""
    before = snapshot(checkout)
    done = invoke(command, *_target_args(command, checkout, tmp_path), *options, *(["--json"] if as_json else []))
    why = f"{given} {NOT_NVIDIA}"
    assert (done.returncode, done.stderr.decode()) == (BAD_INPUT, f"patchkit: {why}\n")
    if as_json:
        assert json.loads(done.stdout) == {"schema": 2, "command": command, "ok": False, "exit_code": BAD_INPUT, "error": why, "path": None}
    else:
        assert done.stdout == b""
    assert snapshot(checkout) == before
    assert not (tmp_path / "out").exists()


# -- 4. scan: one output format ----------------------------------------------------------------------


@pytest.mark.parametrize("order", [["--json", "--markdown"], ["--markdown", "--json"]], ids=["json first", "markdown first"])
def test_scan_refuses_json_and_markdown(checkout: Path, order: list[str]) -> None:
    done = run_cli("scan", str(checkout), *order)
    err = one_line(done, BAD_INPUT, "patchkit: give --json or --markdown, not both")
    doc = json.loads(done.stdout)  # --json was given: the error document
    assert doc == {"schema": 2, "command": "scan", "ok": False, "exit_code": BAD_INPUT, "error": err[len("patchkit: ") : -1], "path": None}


def test_scan_still_compares_mixed_styles(checkout: Path) -> None:
    """scan reads 10 with 12.0 as 10.0 with 12.0: not refused, unlike the patching commands."""
    done = run_cli("scan", str(checkout), "--cc", "12.0")
    assert done.returncode == PROBLEMS, done.stderr.decode()
    assert done.stderr == b""


# -- 5. --python or PATH, not both ---------------------------------------------------------------------


@pytest.mark.parametrize("command", ["apply", "verify", "revert", "status"])
@pytest.mark.parametrize("path", ["checkout", "."], ids=["a path", "an explicit ."])
def test_python_and_path_are_refused_together(checkout: Path, command: str, path: str) -> None:
    given = str(checkout) if path == "checkout" else "."
    before = snapshot(checkout)
    done = invoke(command, "--python", sys.executable, given, cwd=checkout)
    one_line(done, BAD_INPUT, f"patchkit: give PATH or --python, not both (PATH {given}, --python {sys.executable})")
    assert done.stdout == b""
    assert snapshot(checkout) == before


def test_path_still_defaults_to_here(checkout: Path) -> None:
    done = invoke("status", cwd=checkout)
    assert done.returncode == 0, done.stderr.decode()
    assert str(checkout) in done.stdout.decode()


# -- 6. --json failures: an error document on stdout, the line on stderr -------------------------------


@pytest.mark.parametrize("command", ["apply", "verify", "revert", "status", "upstream", "scan"])
def test_missing_path_as_json(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nope"
    done = invoke(command, str(missing), "--json")
    assert done.returncode == BAD_INPUT, done.stderr.decode()
    err = done.stderr.decode()
    assert err.startswith("patchkit: ") and err.count("\n") == 1 and str(missing) in err
    assert b"Traceback" not in done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["command"] == command and doc["ok"] is False and doc["exit_code"] == BAD_INPUT
    assert doc["error"] == err[len("patchkit: ") : -1]
    assert doc["path"] == str(missing)


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["apply", "--bogus"], "No such option '--bogus'"),
        (["generate", "--project", "nope"], "'nope' is not one of"),
        (["scan", "--cc"], "Option '--cc' requires an argument"),
    ],
    ids=["unknown option", "bad choice", "missing value"],
)
def test_usage_errors_as_json(args: list[str], reason: str) -> None:
    # --json goes first: click stops parsing at the error, the document must still come out.
    done = invoke(args[0], "--json", *args[1:])
    err = done.stderr.decode()
    assert done.returncode == BAD_INPUT, err
    assert "Error:" in err and reason in err and "Traceback" not in err
    doc = json.loads(done.stdout)
    assert doc["command"] == args[0] and doc["ok"] is False and doc["exit_code"] == BAD_INPUT and doc["path"] is None
    assert reason in doc["error"]


def test_usage_error_without_json_prints_nothing_on_stdout() -> None:
    done = invoke("apply", "--bogus")
    assert done.returncode == BAD_INPUT
    assert done.stdout == b""
    assert b"Error: No such option '--bogus'" in done.stderr


def test_json_after_double_dash_is_a_path(tmp_path: Path) -> None:
    done = invoke("status", "--", "--json", cwd=tmp_path)
    one_line(done, BAD_INPUT, "patchkit: --json: ")
    assert done.stdout == b""


# -- 7. help ------------------------------------------------------------------------------------------


def _commands() -> list[click.Command]:
    return [cli, *cli.commands.values()]


@pytest.mark.parametrize("command", _commands(), ids=lambda c: c.name)
def test_every_option_has_help(command: click.Command) -> None:
    ctx = click.Context(command, info_name=command.name)
    for param in command.get_params(ctx):
        if isinstance(param, click.Option):
            assert param.help and param.help.strip(), f"{command.name} {param.opts[0]} has no help"


def test_top_level_help_cuts_nothing() -> None:
    done = invoke("--help")
    assert done.returncode == 0
    commands = done.stdout.decode().split("\nCommands:\n")[1].splitlines()
    assert sorted(line.split()[0] for line in commands if line.strip()) == sorted(cli.commands)
    assert not [line for line in commands if "..." in line]


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_command_help(name: str) -> None:
    done = invoke(name, "--help")
    assert done.returncode == 0 and done.stderr == b""
    assert done.stdout.decode().startswith(f"Usage: patchkit {name} [OPTIONS]")



# -- any spelling is the project's own key (caught, when it is one key, once the project is known) --------

@pytest.mark.parametrize(
    "options, said",
    [
        (["--to-cc", "12.0"], "key 12 = key 10"),  # was: "--to-cc 12.0 is not how SGLang writes a compute capability"
        (["--from-cc", "10.0", "--to-cc", "12.0"], "key 12 = key 10"),
        (["--to-cc", "12.1"], "key 12 = key 10"),
        (["--to-cc", "sm_121a"], "key 12 = key 10"),
        (["--from-cc", "9.0", "--to-cc", "12"], "key 12 = key 9"),
    ],
)
def test_cc_written_any_way_is_the_projects_key(checkout: Path, options: list[str], said: str) -> None:
    before = snapshot(checkout)
    # Named: SGLang 0.5.16 only warns without it and no SM12x GPU has multicast (a plain apply leaves it out).
    done = invoke("apply", str(checkout), "--dry-run", "--fix", "torch-symm-mem", *options)
    assert done.returncode == 0, done.stderr.decode()
    assert [line for line in done.stdout.decode().splitlines() if line.startswith("  ") and "key" in line] == [
        f"  TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (module): {said}",
        f"  _WORLD_SIZES_MULTIMEM (class TorchSymmMemCommunicator): {said}"]
    assert snapshot(checkout) == before


def test_no_shipped_patch_for_that_cc_pair_says_so(checkout: Path, tmp_path: Path) -> None:
    patches = tmp_path / "patches"
    assert invoke("generate", "--repo", str(checkout), "--out", str(patches)).returncode == 0
    before = snapshot(checkout)
    done = invoke("apply", str(checkout), "--patches", str(patches), "--from-cc", "9", "--no-generate", "--fix", "deepgemm-sm12x",
                  "--fix", "fusion-self-enable", "--fix", "torch-symm-mem")
    one_line(done, REFUSED, "no shipped patch for SGLang 0.5.16 that copies key 9 to key 12 "
             "(the shipped one copies key 10 to key 12); --no-generate refuses to generate one")
    assert snapshot(checkout) == before


def test_a_command_line_imports_the_module_of_its_command_alone(tmp_path: Path) -> None:
    """Each command is defined in its module, imported when the command line names it; --help
    lists every command, from every module."""
    code = ("import sys; from patchkit.cli import cli, preload; preload(sys.argv[1:]); "
            "print(sorted(m for m in sys.modules if m.startswith('patchkit.cli.') and m not in "
            "('patchkit.cli.boundary', 'patchkit.cli.options')))")
    for args, imported in ((["verify", "--json", "."], ["patchkit.cli.verify"]), (["--json", "apply"], ["patchkit.cli.apply"]),
                           (["--help"], []), (["nosuch"], [])):
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, cwd=tmp_path)
        assert done.stdout == f"{imported}\n", args
