"""Render the jinja2 templates (shipped with patchkit, or a user's override folder)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.data import shipped
from patchkit.errors import BadInput

if TYPE_CHECKING:
    import jinja2

_ENVIRONMENTS: dict[Path | None, jinja2.Environment] = {}


def _environment(override: Path | None) -> jinja2.Environment:
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
        env.filters["reflow"] = reflow
    return env


def reflow(text: str, width: int = 72, indent: str = "") -> str:
    """``text``'s paragraphs (parted by blank lines) each joined into one and wrapped at
    ``width`` columns, as git wants a commit message; lines after a paragraph's first start
    with ``indent`` (a list item's or a trailer's continuation).  The filter ``reflow`` of the
    templates: rationales written at another width read as the rest of the message."""
    import re
    import textwrap

    paragraphs = [" ".join(line.strip() for line in p.splitlines()) for p in re.split(r"\n[ \t]*\n", text)]
    return "\n\n".join(textwrap.fill(p, width, subsequent_indent=indent, expand_tabs=False, replace_whitespace=False,
                                      break_long_words=False, break_on_hyphens=False) for p in paragraphs if p.strip())


def render(name: str, context: dict[str, object], override: Path | None = None) -> str:
    import jinja2

    env = _environment(override)
    try:
        return env.get_template(name).render(**context)
    except jinja2.TemplateError as exc:
        where = getattr(exc, "filename", None) or name
        line = getattr(exc, "lineno", None)
        raise BadInput(f"{where}:{line}" if line else where, f"template error: {exc.message or exc}") from None
