"""A command's result as people and programs read it: pure, a result in, lines or a document out.

``text(result, terminal)`` is its lines (``terminal``: grouped under headings, else each place
in a file as ``path:line: text``), ``document(result)`` its --json document.  The result of a
command module ``patchkit.commands.X`` is rendered by ``patchkit.render.X`` (its ``to_text``
and ``to_json``, as pip's ``list`` has its formatters; and its ``failure``, where a result
can fail although it has something to say); the shapes several commands share (``report.Each``,
``report.Auto``) here.  ``cli/boundary.py`` adds the envelope.
"""

from __future__ import annotations

import importlib

from patchkit.report import Auto, Each


def text(result, terminal: bool) -> list[str]:
    """The lines ``result`` prints."""
    if isinstance(result, Each):
        return _each_text(result, terminal)
    if isinstance(result, Auto):
        from patchkit.render import auto

        return auto.to_text(result, terminal)
    return _module(result).to_text(result, terminal)


def document(result) -> dict:
    """The --json document of ``result`` (before the envelope)."""
    if isinstance(result, Each):
        doc = document(result.results[0]) if len(result.results) == 1 else \
            {"command": result.command, "targets": [document(r) for r in result.results]}
        return doc if result.env is None else dict(doc, not_installed=list(result.env.missing))
    if isinstance(result, Auto):
        from patchkit.render import auto

        return auto.to_json(result)
    return _module(result).to_json(result)


def failure(result) -> str | None:
    """The line of a result that fails although it printed its lines (doctor with no GPU seen),
    printed on stderr after them as every failure's is; None for any other result."""
    if isinstance(result, (Each, Auto)):
        return None
    said = getattr(_module(result), "failure", None)
    return said(result) if said is not None else None


def _module(result):
    command = type(result).__module__
    if not command.startswith("patchkit.commands."):
        raise TypeError(f"no renderer for {type(result).__name__}")
    return importlib.import_module(f"patchkit.render.{command.rsplit('.', 1)[1]}")


def _each_text(each: Each, terminal: bool) -> list[str]:
    lines = [environment_line(each.env)] if each.env is not None else []
    for i, result in enumerate(each.results):
        lines += ([""] if i else []) + text(result, terminal)
    return lines


def environment_line(env) -> str:
    """What ``--python EXE`` holds: each project judged (wheel or editable) and the known
    projects not installed."""
    from patchkit.fixes.registry import PROJECTS

    found = ", ".join(f"{PROJECTS[i.project].label} ({i.how})" for i in env.installs)
    absent = f"; not installed: {', '.join(PROJECTS[name].label for name in env.missing)}" if env.missing else ""
    return f"{env.exe}: {found}{absent}"
