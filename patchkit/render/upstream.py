"""What ``patchkit upstream`` says (``commands.upstream.UpstreamResult``): the target and HEAD,
the fixes that change nothing there; with ``--dry-run`` each commit message and PR.md, else each
commit made, the mboxes and PR.md written, and what to do next."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.patch import message
from patchkit.render.apply import waited_line
from patchkit.render.source import source_words
from patchkit.render.where import where_line
from patchkit.text import plural

if TYPE_CHECKING:
    from patchkit.commands.upstream import UpstreamResult


def to_text(r: UpstreamResult, terminal: bool) -> list[str]:
    lines = [f"{where_line(r.target)}; HEAD {r.head[:12]}"]
    lines += [f"note: {fix}: {action}, no commit" for fix, action in r.skipped]
    if r.made is None:
        lines.append(f"would create branch {r.branch} with {plural(len(r.messages), 'commit')}:" if len(r.messages) > 1
                     else f"would create branch {r.branch} with one commit:")
        for text in r.messages:
            lines += ["", text]
        return lines + ["--- PR.md ---", r.pr]
    made = r.made
    if made.waited is not None:
        lines.append(waited_line(made.waited))
    for (files, source), commit, text in zip(r.changes, made.commits, r.messages, strict=True):
        lines.append(f"created branch {made.branch} at {commit[:12]}: {message.subject(text)}" if len(r.messages) == 1
                     else f"committed {commit[:12]} on branch {made.branch}: {message.subject(text)}")
        lines.append(f"  author {made.author[0]} <{made.author[1]}>; {plural(files, 'file')} changed ({source_words(source)})")
    lines.append(f"wrote {', '.join(map(str, made.mboxes))} (git am) and {made.pr}")
    lines.append(f"next: git push <your fork> {made.branch}, then open a pull request with {made.pr}")
    return lines


def to_json(r: UpstreamResult) -> dict[str, object]:
    doc: dict[str, object] = {"command": "upstream", "path": r.path, "head": r.head, "branch": r.branch, "dry_run": r.dry_run,
           "fixes": list(r.fixes), "message": "\n".join(r.messages), "pr": r.pr, "files": list(r.files)}
    if r.made is not None:
        made = r.made
        doc.update({"commit": made.commits[-1], "commits": list(made.commits), "mbox": str(made.mboxes[0]),
                    "mboxes": list(map(str, made.mboxes)), "pr_path": str(made.pr)})
    return doc
