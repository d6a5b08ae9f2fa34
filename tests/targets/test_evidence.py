"""patchkit.targets.evidence: why a process runs a package's files, from what /proc shows of it
(a ``Seen``) and its interpreter's site-packages, read as text.  No process is started here:
test_processes.py and test_servers_by_evidence.py start them."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.targets.evidence import CommandLine, Evidence, Seen, Why, evidence, parse_command


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["python", "-m", "sglang.launch_server", "--port", "1"],
         CommandLine(frozenset(), "sglang.launch_server", None, False, ("--port", "1"))),
        (["python", "-Im", "sglang"], CommandLine(frozenset("I"), "sglang", None, False, ())),
        (["python", "-Es", "-Xdev", "-W", "ignore", "-msglang.x"], CommandLine(frozenset("Es"), "sglang.x", None, False, ())),
        (["python", "-Pu", "/x/sglang/launch_server.py", "-m", "y"],
         CommandLine(frozenset("Pu"), None, "/x/sglang/launch_server.py", False, ("-m", "y"))),
        (["python", "--check-hash-based-pycs", "always", "--", "run.py"], CommandLine(frozenset(), None, "run.py", False, ())),
        (["python", "-Ic", "import sglang", "-m", "sglang"], CommandLine(frozenset("I"), None, None, True, ("-m", "sglang"))),
        (["python", "-", "a"], CommandLine(frozenset(), None, None, True, ("a",))),
        (["python", "-u"], CommandLine(frozenset("u"), None, None, True, ())),
    ],
)
def test_the_command_line_is_read_as_cpython_reads_it(argv, expected):
    assert parse_command(argv) == expected


def system_python(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(an interpreter outside a virtualenv, its site-packages, the user's site-packages below HOME)."""
    prefix = tmp_path / "usr"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin/python3.11").write_bytes(b"")
    site = prefix / "lib/python3.11/site-packages"
    user = tmp_path / "home/.local/lib/python3.11/site-packages"
    site.mkdir(parents=True)
    user.mkdir(parents=True)
    return prefix / "bin/python3.11", site, user


def seen(argv: list[str], interpreter: Path, environ: dict | None, cwd: str = "/") -> Seen:
    return Seen(parse_command(argv), cwd, environ, str(interpreter), str(interpreter), ())


def test_a_pth_line_of_the_user_site_or_the_prefix_names_the_checkout(tmp_path):
    """`pip install --user -e` in compat mode writes a .pth whose line is the folder that holds
    the package: that is an editable install of the checkout, unless -s, -I or PYTHONNOUSERSITE
    (not read under -E) leaves the user's site-packages out."""
    python, site, user = system_python(tmp_path)
    checkout = tmp_path / "x"
    (checkout / "python/sglang").mkdir(parents=True)
    (user / "__editable__.sglang-0.5.9.pth").write_text(f"{checkout}/python\n")
    package = checkout / "python/sglang"
    home = {"HOME": str(tmp_path / "home")}
    server = ["python3", "-m", "sglang.launch_server"]
    by_user = Evidence(Why.EDITABLE, f"{checkout}/python", str(user / "__editable__.sglang-0.5.9.pth"))
    assert evidence(seen(server, python, home), package) == by_user
    assert evidence(seen(["python3", "-s", "-m", "sglang.launch_server"], python, home), package) is None
    assert evidence(seen(["python3", "-I", "-m", "sglang.launch_server"], python, home), package) is None
    assert evidence(seen(server, python, {**home, "PYTHONNOUSERSITE": "1"}), package) is None
    assert evidence(seen(["python3", "-E", "-m", "sglang.launch_server"], python, {**home, "PYTHONNOUSERSITE": "1"}),
                    package) == by_user
    (site / "sglang.pth").write_text(f"# a comment\n{checkout}/python\n")
    assert evidence(seen(["python3", "-s", "-m", "sglang.launch_server"], python, home), package) == Evidence(
        Why.EDITABLE, f"{checkout}/python", str(site / "sglang.pth"))
    other = tmp_path / "y"
    (other / "python/sglang").mkdir(parents=True)
    assert evidence(seen(server, python, home), other / "python/sglang") is None


def test_an_installed_package_of_the_interpreters_prefix(tmp_path):
    """Outside a virtualenv, the interpreter's prefix's site-packages: the package installed there
    is the interpreter's (as for a venv, whose interpreter EnvironmentPrefix.owns tells)."""
    python, site, _ = system_python(tmp_path)
    server = ["python3", "-m", "sglang.launch_server"]
    assert evidence(seen(server, python, {}), site / "sglang") == Evidence(Why.INTERPRETER, str(python))
    assert evidence(seen(server, python, {}), tmp_path / "elsewhere/site-packages/sglang") is None


def test_what_could_not_be_read_is_the_answer_only_without_evidence(tmp_path):
    python, _, _ = system_python(tmp_path)
    hidden = Evidence(Why.UNREADABLE, "/proc/4242/environ", "Permission denied")
    checkout = tmp_path / "x"
    server = seen(["python3", "-m", "sglang.launch_server"], python, None, cwd=str(checkout / "python"))._replace(unread=(hidden,))
    assert evidence(server, checkout / "python/sglang") == Evidence(Why.CWD, str(checkout / "python"))
    assert evidence(server, tmp_path / "y/python/sglang") == hidden
