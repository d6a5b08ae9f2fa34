"""Render the jinja2 templates (shipped with patchkit, or a user's override folder)."""

from __future__ import annotations

from pathlib import Path

from patchkit.data import shipped
from patchkit.errors import BadInput


def render(name: str, context: dict, override: Path | None = None) -> str:
    import jinja2  # imported here: only generate and upstream render templates

    folders = [str(override)] if override else []
    folders.append(str(shipped("templates")))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folders),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    try:
        return env.get_template(name).render(**context)
    except jinja2.TemplateError as exc:
        where = getattr(exc, "filename", None) or name
        line = getattr(exc, "lineno", None)
        raise BadInput(f"{where}:{line}" if line else where, f"template error: {exc.message or exc}") from None
