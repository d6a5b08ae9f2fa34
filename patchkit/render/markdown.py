"""``patchkit doctor --format markdown``: the GPUs, the releases installed, the failure modes they are
exposed to, what patchkit applied and the settings, as GitHub-flavoured markdown to paste into an
upstream issue (as people paste ``vllm collect-env``): no colour codes, control characters
escaped, home folders written ``~``, and the launch line's secrets (``--api-key``, tokens) redacted."""

from __future__ import annotations

import os
import re
import shlex
from typing import TYPE_CHECKING

from patchkit.render.machine import link_summary
from patchkit.render.modes import COST, VERDICT
from patchkit.text import escaped

if TYPE_CHECKING:
    from patchkit.commands.doctor import DoctorResult

SECRET_FLAGS = ("--api-key", "--hf-token", "--token", "--admin-api-key", "--ssl-keyfile-password")
_SECRET_TEXT = re.compile(r"\b(hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_-]{8,}|ghp_[A-Za-z0-9]{8,}|nvapi-[A-Za-z0-9_-]{8,})")
_HOME = re.compile(r"(?<![\w.-])/(?:home/[^/\s]+|root)(?=/|\s|$|`)")
REDACTED = "<redacted>"


def redact(text: str) -> str:
    """Home folders as ``~`` and token-like words as ``<redacted>``; control characters escaped."""
    home = os.environ.get("HOME", "")
    if home and home != "/":
        text = text.replace(home.rstrip("/") + "/", "~/")
    return _SECRET_TEXT.sub(REDACTED, _HOME.sub("~", escaped(text)))


def launch_line(words: tuple[str, ...]) -> str:
    """The server's command line with each secret flag's value redacted, shell-quoted."""
    out: list[str] = []
    hide = False
    for word in words:
        name, eq, _ = word.partition("=")
        if hide:
            out.append(REDACTED)
            hide = False
        elif name in SECRET_FLAGS and eq:
            out.append(f"{name}={REDACTED}")
        else:
            out.append(word)
            hide = word in SECRET_FLAGS
    return redact(shlex.join(out))


def _cell(text: str) -> str:
    return redact(text).replace("|", "\\|")


def markdown(r: DoctorResult, versions: dict[str, str]) -> list[str]:
    """The report of a ``DoctorResult`` ``r``; ``versions``: the distributions installed, by name."""
    out = ["### Environment (patchkit doctor --format markdown)", ""]
    if r.seen is None:
        out += [f"GPUs: none seen ({_cell(r.unseen or '')})", ""]
    else:
        out += ["| GPU | name | cc | bus |", "|---|---|---|---|"]
        out += [f"| {g.index} | {_cell(g.name)} | {g.cc_text()} | {g.bus_id} |" for g in r.seen.gpus]
        out += ["", f"Links: {_cell(link_summary(r.seen))}", ""]
    if r.code is not None:
        out += [f"Python: `{redact(str(r.code.exe))}`", ""]
    if versions:
        out += ["| distribution | version |", "|---|---|"] + [f"| {n} | {_cell(v)} |" for n, v in sorted(versions.items()) if n]
        out.append("")
    if r.launch is not None:
        out += ["Launch line:", "", "```sh", launch_line(r.launch), "```", ""]
    out += ["#### Failure modes of these releases on these GPUs", ""]
    out += [f"- **{h.mode.name}** ({VERDICT[h.verdict]}{' ' + ', '.join(c.value for c in h.unstated) if h.unstated else ''}; "
            f"{COST[h.mode.cost]}): {_cell(h.mode.title)}; {h.exposure.project} {_cell(h.version)}" for h in r.modes] \
        or ["none known for the releases installed"]
    out += ["", "#### patchkit's fixes", ""]
    fixes = [f"- {j.here.fix} on {_cell(t.label)}: {j.here.status}{' (applied by patchkit)' if j.here.by_patchkit else ''}"
             for t in r.targets for j in t.fixes]
    out += fixes or ["no project patchkit patches is installed"]
    if r.settings:
        out += ["", "#### Settings", ""]
        out += [f"- {h.setting.name} for {h.cc.smi_text()}: {h.need}" for h in r.settings]
    return out
