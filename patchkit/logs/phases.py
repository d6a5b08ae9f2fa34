"""How far a server's start got, read from its log lines.

The texts are the servers' own (SGLang 0.5.9 and 0.5.23, the release mirror): the ready lines
(``http_server.py``: "The server is fired up and ready to roll!"; vLLM's is uvicorn's
"Application startup complete."), the phases ``model_runner.py`` logs on the way, and the
line SGLang's launch-phase SIGQUIT handler (``engine.py``) logs when a child process failed.
"""

from __future__ import annotations

READY = ("The server is fired up and ready to roll!", "Application startup complete.")
# (text of the line, the phase as watch says it), in the order a start reaches them.
PHASES = (
    ("Init torch distributed begin.", "torch distributed"),
    ("Load weight begin.", "loading weights"),
    ("Load weight end.", "weights loaded"),
    ("KV Cache is allocated.", "KV cache allocated"),
    ("Capture cuda graph begin.", "CUDA graph capture"),
    ("Capture cuda graph end.", "CUDA graph captured"),
)
CHILD_FAILED = "Received sigquit from a child process. It usually means the child failed."
SCHEDULER_EXCEPTION = "Scheduler hit an exception: "


def ready(text: str) -> bool:
    return any(r in text for r in READY)


def phase(text: str) -> str | None:
    for needle, name in PHASES:
        if needle in text:
            return name
    return None
