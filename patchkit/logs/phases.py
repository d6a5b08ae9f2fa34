"""How far a server's start got, read from its log lines.

The texts are the servers' own (SGLang 0.5.9 and 0.5.23, the release mirror; vLLM 0.11.0's
source; uvicorn's): the phases ``model_runner.py`` logs on the way, the line SGLang's
launch-phase SIGQUIT handler (``engine.py``) logs when a child process failed, and the ready
lines.  A start is ready at the ready line of the project the log is of:

- SGLang: "The server is fired up and ready to roll!" (``http_server.py``, ``_wait_and_warmup``),
  logged after its warm-up request.  uvicorn's "Application startup complete." comes before
  that request (SGLang starts the warm-up thread in the app's lifespan, and uvicorn logs the
  line when the lifespan has started): a warm-up that crashes comes after it.
- vLLM: uvicorn's "Application startup complete." (vLLM builds the engine before it serves).

A log is SGLang's once a line is one of SGLang's records: ``configure_logger`` (0.5.9
``utils/common.py``) formats them ``[%Y-%m-%d %H:%M:%S{prefix}] message``, the prefix the
scheduler's ranks (`` TP0``, `` DP1 TP3``, optional milliseconds before it), and SGLang gives
uvicorn's own lines the same date (``set_uvicorn_logging_configs``: ``[2026-02-11 10:03:14] INFO:
Application startup complete.``).  vLLM's records are ``INFO 10-05 12:00:00 [file.py:12] ...``
(``%m-%d``, no year) and uvicorn's plain ``INFO:     ...``: never SGLang's.
"""

from __future__ import annotations

import re

from patchkit.fixes.modes import Phase

SGLANG_READY = "The server is fired up and ready to roll!"
UVICORN_READY = "Application startup complete."  # vLLM's ready line; in SGLang's log, before the warm-up
READY = (SGLANG_READY, UVICORN_READY)
# (text of the line, the phase as watch says it), in the order a start reaches them.
PHASES = (
    ("Init torch distributed begin.", Phase.DISTRIBUTED),
    ("Load weight begin.", Phase.LOADING),
    ("Load weight end.", Phase.LOADED),
    ("KV Cache is allocated.", Phase.KV_CACHE),
    ("Capture cuda graph begin.", Phase.GRAPH_CAPTURE),
    ("Capture cuda graph end.", Phase.CAPTURED),
)
CHILD_FAILED = "Received sigquit from a child process. It usually means the child failed."
SCHEDULER_EXCEPTION = "Scheduler hit an exception: "
_SGLANG_RECORD = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?(?: [A-Z_]+\d+)*\] ")


def sglang_record(text: str) -> bool:
    """Whether the line is one of SGLang's log records (its date, its ranks)."""
    return text[:1] == "[" and _SGLANG_RECORD.match(text) is not None


def ready(text: str, sglang: bool = False) -> bool:
    """Whether the line says the start is ready, in a log that is SGLang's (``sglang``) or not."""
    return SGLANG_READY in text or not sglang and UVICORN_READY in text


def phase(text: str) -> Phase | None:
    for needle, name in PHASES:
        if needle in text:
            return name
    return None
