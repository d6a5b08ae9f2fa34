"""Render the jinja2 templates (shipped with patchkit, or a user's override folder)."""

from __future__ import annotations

from pathlib import Path

from patchkit.data import shipped
from patchkit.errors import BadInput

_ENVIRONMENTS: dict = {}


def _environment(override: Path | None):
    """One jinja2 environment per template folder: each template is compiled once per run."""
    env = _ENVIRONMENTS.get(override)
    if env is None:
        import jinja2  # imported here: only generate and upstream render templates

        folders = [str(override)] if override else []
        folders.append(str(shipped("templates")))
        env = _ENVIRONMENTS[override] = jinja2.Environment(
            loader=jinja2.FileSystemLoader(folders),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
            autoescape=False,
        )
    return env


def render(name: str, context: dict, override: Path | None = None) -> str:
    import jinja2

    env = _environment(override)
    try:
        return env.get_template(name).render(**context)
    except jinja2.TemplateError as exc:
        where = getattr(exc, "filename", None) or name
        line = getattr(exc, "lineno", None)
        raise BadInput(f"{where}:{line}" if line else where, f"template error: {exc.message or exc}") from None
