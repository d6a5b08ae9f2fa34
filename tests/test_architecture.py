"""The house keeps its shape: stages import only from stages below them (docs/ARCHITECTURE.md).

Every import counts, the ones inside functions too (the start-up path imports lazily).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support.repos import ROOT

PACKAGE = ROOT / "patchkit"

# Lowest first.  A module may import from its own stage and the stages below it.
STAGES = [
    ("ground", ["patchkit", "patchkit.errors", "patchkit.text", "patchkit.match", "patchkit.signals", "patchkit.types", "patchkit.digest", "patchkit.versions", "patchkit.data", "patchkit.bounded"]),
    ("source", ["patchkit.git"]),
    ("fixes", ["patchkit.fixes"]),
    ("rewrite", ["patchkit.rewrite"]),
    ("patch", ["patchkit.patch", "patchkit.scan"]),
    ("plan", ["patchkit.plan"]),
    ("targets", ["patchkit.targets"]),
    ("gpus", ["patchkit.gpus"]),
    ("kernels", ["patchkit.kernels"]),
    ("judge", ["patchkit.judge"]),
    ("report", ["patchkit.report"]),
    ("logs", ["patchkit.logs"]),
    ("commands", ["patchkit.commands"]),
    ("render", ["patchkit.render"]),
    ("cli", ["patchkit.cli"]),
    ("entry", ["patchkit.__main__"]),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def stage(module: str) -> int:
    """The stage of a module: the longest prefix listed wins."""
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(STAGES):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    assert rank is not None, f"{module} is in no stage of docs/ARCHITECTURE.md"
    return rank


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every patchkit module that ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "patchkit"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "patchkit":
            found.append((node.lineno, node.module))
            # ``from patchkit.targets import bytecode`` imports patchkit.targets.bytecode
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                      if (PACKAGE.parent / f"{node.module}.{a.name}".replace(".", "/")).with_suffix(".py").is_file()]
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_no_import_from_a_higher_stage(path: Path) -> None:
    here = stage(module_name(path))
    upward = [f"{path.relative_to(ROOT)}:{line} imports {name} ({STAGES[stage(name)][0]} is above {STAGES[here][0]})"
              for line, name in imports(path) if stage(name) > here]
    assert upward == []


def test_no_module_imports_itself_round_a_circle() -> None:
    """No cycle among patchkit's modules, every import counted (the ones inside functions too): each
    module can be read, and changed, knowing only those below it.  A package imports its parent."""
    modules = {module_name(p): p for p in MODULES}
    graph = {m: {i for _, i in imports(p) if i in modules and i != m and not m.startswith(i + ".")} for m, p in modules.items()}
    done: set[str] = set()

    def circle(m: str, path: list[str]) -> list[str] | None:
        if m in path:
            return path[path.index(m):] + [m]
        if m in done:
            return None
        for n in sorted(graph[m]):
            found = circle(n, path + [m])
            if found:
                return found
        done.add(m)
        return None

    assert next((c for m in sorted(graph) if (c := circle(m, []))), None) is None  # the first circle found, if any


def test_every_stage_is_in_the_architecture_doc() -> None:
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    for _name, prefixes in STAGES:
        for prefix in prefixes:
            if prefix != "patchkit":
                assert f"`{prefix.removeprefix('patchkit.').replace('.', '/')}" in doc, prefix


SHARED = {"__init__", "given", "transact"}  # what several commands share (their targets, their transaction): no command
COMMANDS = sorted(p.stem for p in (PACKAGE / "commands").glob("*.py") if p.stem not in SHARED)


def test_commands_return_typed_results_rendered_apart() -> None:
    """A command module returns a typed result and builds no lines: ``render/<command>.py``
    has its ``to_text`` and ``to_json``, and no module of commands/ or judge/ makes the lines
    that name places in files (``report.Heading``, ``Place``, ``render``)."""
    lines = [f"{path.relative_to(ROOT)}:{node.lineno} imports {a.name}" for path in MODULES if path.parent.name in ("commands", "judge")
             for node in ast.walk(ast.parse(path.read_bytes())) if isinstance(node, ast.ImportFrom) and node.module == "patchkit.report"
             for a in node.names if a.name in ("Heading", "Place", "render")]
    assert lines == []
    for name in COMMANDS:
        tree = ast.parse((PACKAGE / "render" / f"{name}.py").read_bytes())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert {"to_text", "to_json"} <= defined, name


def test_tests_import_their_helpers_from_the_support_package() -> None:
    """tests/conftest.py holds fixtures only; a test module imports its helpers from the package
    tests/support/ (``from support.cli import invoke``), so pytest runs from any folder."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}" for name in names if name.split(".")[0] in ("conftest", "crash_helpers")]
    assert found == []


# The strs judge/ and plan/ may return: names, not sentences; and the words of an error raised there.
NAMES = {("judge/kernels.py", "label"): "a distribution's name and version",
         ("judge/jit.py", "label"): "a JIT library's distribution and version", ("plan/write_apply.py", "_patch_id"): "a sha256",
         ("plan/verify.py", "_qualified"): "a table's name as the evaluator spells it",
         ("plan/verify.py", "reason"): "a stale bytecode file's reason, as targets/bytecode.py gives it (a protocol's member)",
         ("plan/reasons.py", "advice"): "a JIT build's advice, as targets/jit_builds.py gives it (a protocol's member)",
         ("judge/settings.py", "ptxas_target"): "a GPU's sm_ target, as ptxas's --gpu-name spells it",
         ("plan/reasons.py", "no_shipped_words"): "the words of --no-generate's refusal, raised in plan (and of the note beside it)",
         ("judge/launch.py", "_model"): "the model as the server's command line names it",
         ("judge/settings.py", "as_set"): "a variable's value as the environment judged sets it",
         ("judge/launch.py", "_quant"): "the quantization method as the command line or config.json spells it"}


def test_judge_and_plan_return_values_not_sentences() -> None:
    """The judge and the planner return values: a reason is a value (``judge/reasons.py``,
    ``plan/reasons.py``) that ``render/reasons.py`` alone says.  No function of judge/ or plan/
    is declared to return a str, returns an f-string or a str literal, or appends one to a list
    (the notes and problems it returns), but those that return a name (``NAMES``)."""
    found = []
    for path in [p for p in MODULES if p.parent.name in ("judge", "plan")]:
        where = f"{path.parent.name}/{path.name}"
        for fn in [n for n in ast.walk(ast.parse(path.read_bytes())) if isinstance(n, ast.FunctionDef)]:
            if (where, fn.name) in NAMES:
                continue
            said = [node.lineno for node in ast.walk(fn)
                    if isinstance(node, ast.Return) and _text(node.value)
                    or isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("append", "extend") and any(map(_text, node.args))]
            if fn.returns is not None and ast.unparse(fn.returns) in ("str", "str | None"):
                said.append(fn.lineno)
            found += [f"{where}:{line} ({fn.name})" for line in said]
    assert found == []


def _text(node) -> bool:
    """An f-string or a str literal."""
    return isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, str)


def test_doctors_data_flow_names_format_env() -> None:
    """docs/ARCHITECTURE.md's data flow of doctor names ``--format env``'s path through the code, by names
    the code still has: commands/doctor.py's doctor_env, the SettingsToSet of commands/settings.py, and
    render/settings.py, which writes the export lines and the failure line."""
    import patchkit.commands.doctor as doctor
    import patchkit.commands.settings as settings
    import patchkit.render.settings as rendered

    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = doc[doc.index("## The data flow of `patchkit doctor`"):]
    section = section[:section.index("\n## ")]
    for name in ("`--format env`", "`doctor_env`", "`commands/settings.py`", "`SettingsToSet`", "`render/settings.py`",
                 "`judge/settings.py`", "`export NAME=VALUE`"):
        assert name in section, name
    assert callable(doctor.doctor_env) and callable(settings.settings_to_set) and isinstance(settings.SettingsToSet, type)
    assert callable(rendered.to_text) and callable(rendered.failure)
