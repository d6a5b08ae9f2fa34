"""A command's result as people and programs read it: pure, a result in, lines or a document out.

``text(result, terminal)`` is its lines (``terminal``: grouped under headings, else each place
in a file as ``path:line: text``), ``document(result)`` its --json document.  The result of a
command is rendered by the module ``RENDERERS`` names for its type (its ``to_text`` and
``to_json``, as pip's ``list`` has its formatters; and its ``failure``, where a result can fail
although it has something to say); the shapes several commands share (``report.Each``,
``report.Auto``) here.  ``cli/boundary.py`` adds the envelope (``SCHEMA``, the command, ``ok``,
``exit_code``).  A command of targets (apply, verify, revert, status: its render module says
``ONE_TARGET``) renders each target's part, and its document holds them in ``targets``, a list
however many targets there are.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from patchkit.report import Auto, Each

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    from patchkit.report import Result
    from patchkit.targets.environment import Environment

    class Renderer(Protocol):
        """A module ``RENDERERS`` names.  Each takes the results of its own types, chosen by the
        result's type at run time, which no checker follows: the result is ``Any`` to it."""

        def to_text(self, result: Any, terminal: bool) -> list[str]: ...

        def to_json(self, result: Any) -> dict[str, object]: ...

# The version of every --json document's shape (docs/REFERENCE.md, "JSON documents").  The documents
# before it carried no version: they are 1.  2: every document has ``schema``, ``command``, ``ok`` and
# ``exit_code``; apply, verify, revert and status always hold their targets in a ``targets`` list;
# verify's per-target ``ok`` is ``in_effect``.  A change that takes a field away or changes what one
# means makes it 3; a field added keeps it.
SCHEMA = 2

# Each result type (``patchkit.commands``' classes, by name) and the module of ``patchkit.render``
# that renders it; named as strings, so that rendering one result imports one module.
RENDERERS: dict[str, str] = {
    "ApplyResult": "apply",
    "DiagnoseResult": "diagnose",
    "DoctorResult": "doctor", "DoctorMarkdown": "doctor", "NoProjectHere": "doctor",
    "FixesResult": "fixes",
    "GenerateResult": "generate", "NoKeys": "generate",
    "KernelsResult": "kernels",
    "RevertResult": "revert",
    "TreeScan": "scan", "CompareScan": "scan",
    "SettingsVerified": "settings", "SettingsToSet": "settings",
    "StatusResult": "status",
    "UpstreamResult": "upstream",
    "VerifyResult": "verify",
    "WatchResult": "watch",
}


def text(result: Result, terminal: bool) -> list[str]:
    """The lines ``result`` prints."""
    if isinstance(result, Each):
        return _each_text(result, terminal)
    if isinstance(result, Auto):
        from patchkit.render import auto

        return auto.to_text(result, terminal)
    return _module(result).to_text(result, terminal)


def document(result: Result) -> dict[str, object]:
    """The --json document of ``result`` (before the envelope)."""
    if isinstance(result, Each):
        doc: dict[str, object] = {"targets": [target_document(r) for r in result.results]}
        return doc if result.env is None else {**environment(result.env), **doc}
    if isinstance(result, Auto):
        from patchkit.render import auto

        return auto.to_json(result)
    module = _module(result)
    return {"targets": [module.to_json(result)]} if getattr(module, "ONE_TARGET", False) else module.to_json(result)


def target_document(result: Result) -> dict[str, object]:
    """One target's part of a document's ``targets`` (apply, verify, revert, status)."""
    module = _module(result)
    if not getattr(module, "ONE_TARGET", False):
        raise TypeError(f"{type(result).__name__} is not a target's result")
    return module.to_json(result)


def failure(result: Result) -> str | None:
    """The line of a result that fails although it printed its lines (doctor with no GPU seen),
    printed on stderr after them as every failure's is; None for any other result."""
    if isinstance(result, (Each, Auto)):
        return None
    said: Callable[[Any], str | None] | None = getattr(_module(result), "failure", None)
    return said(result) if said is not None else None


def _module(result: Result) -> Renderer:
    return renderer(type(result))


def renderer(kind: type) -> Renderer:
    """The render module of a result of type ``kind`` (``RENDERERS``)."""
    name = RENDERERS.get(kind.__name__) if kind.__module__.startswith("patchkit.commands.") else None
    if name is None:
        raise TypeError(f"no renderer for {kind.__name__}")
    return importlib.import_module(f"patchkit.render.{name}")


def _each_text(each: Each, terminal: bool) -> list[str]:
    lines = [environment_line(each.env)] if each.env is not None else []
    for i, result in enumerate(each.results):
        lines += ([""] if i else []) + text(result, terminal)
    return lines


def environment(env: Environment) -> dict[str, object]:
    """What ``--python EXE`` holds, in a document: each project judged and the known projects not installed."""
    return {"python": str(env.exe), "installed": [{"project": i.project, "how": i.how} for i in env.installs],
            "not_installed": list(env.missing)}


def environment_line(env: Environment) -> str:
    """What ``--python EXE`` holds: each project judged (wheel or editable) and the known
    projects not installed."""
    from patchkit.fixes.registry import PROJECTS

    found = ", ".join(f"{PROJECTS[i.project].label} ({i.how})" for i in env.installs)
    absent = f"; not installed: {', '.join(PROJECTS[name].label for name in env.missing)}" if env.missing else ""
    return f"{env.exe}: {found}{absent}"
