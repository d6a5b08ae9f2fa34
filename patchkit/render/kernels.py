"""What ``patchkit kernels`` says (``commands.kernels.KernelsResult``): what was read and for
which GPUs, then each file (or each distribution and its files) with its verdict."""

from __future__ import annotations

from patchkit.judge.kernels import distribution_lines
from patchkit.text import plural


def to_text(r, terminal: bool) -> list[str]:
    for_gpus = f" for {', '.join(f'{a}.{b}' for a, b in r.ccs)} ({r.source})" if r.ccs else ""
    if r.exe is not None:
        cuda = [d for d in r.found if d.files]
        lines = [f"{r.exe}: {plural(len(cuda), 'distribution')} with CUDA code{for_gpus}"]
        for d in r.found:
            lines += distribution_lines(d, list(r.ccs), listing=True)
    else:
        lines = [f"{plural(len(r.files), 'file')}{for_gpus}"] + [f"{f.shown}: {f.verdict()}" for f in r.files]
    return lines + list(r.note)


def to_json(r) -> dict:
    files = [f.to_json(d.dist) for d in r.found for f in d.files] if r.exe is not None else [f.to_json(None) for f in r.files]
    return {"command": "kernels", "ok": not r.failing, "exit_code": r.exit_code, "gpus": [f"{a}.{b}" for a, b in r.ccs] or None,
            "gpus_from": r.source, "note": list(r.note) or None, "files": files}
