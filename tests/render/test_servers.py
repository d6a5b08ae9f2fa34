"""patchkit.render.servers: the servers apply, revert and status name, each with why, from values alone."""

from __future__ import annotations

import json

from patchkit.render.servers import because, restart_json, restart_lines
from patchkit.targets.evidence import Evidence, Why
from patchkit.targets.processes import Process

SITE = "/v/lib/python3.11/site-packages"
ONE = Process(1234, "/v/bin/python -m sglang.launch_server --port 30000", 7, Evidence(Why.PYTHONPATH, "/x/python"))
TWO = Process(1240, "/v/bin/vllm serve", 8, Evidence(Why.INTERPRETER, "/v/bin/python"))


def test_restart_lines_wording():
    assert restart_lines([]) == []
    assert restart_lines([ONE]) == [
        "1 running process started before the change and may still run the old code; restart it to load the change:",
        "  pid 1234: /v/bin/python -m sglang.launch_server --port 30000",
        "    because its PYTHONPATH has /x/python",
    ]
    assert restart_lines([ONE, TWO]) == [
        "2 running processes started before the change and may still run the old code; restart them to load the change:",
        "  pid 1234: /v/bin/python -m sglang.launch_server --port 30000",
        "    because its PYTHONPATH has /x/python",
        "  pid 1240: /v/bin/vllm serve",
        "    because it runs /v/bin/python, a Python of the environment the package is installed in",
    ]


def test_each_reason_has_its_sentence():
    said = {
        Evidence(Why.SCRIPT, "/x/python/sglang/launch_server.py"): "because it runs /x/python/sglang/launch_server.py",
        Evidence(Why.CWD, "/x/python"): "because its current folder is /x/python, the first place python -m and -c import from",
        Evidence(Why.PYTHONPATH, "/x/python"): "because its PYTHONPATH has /x/python",
        Evidence(Why.INTERPRETER, "/v/bin/python3"):
            "because it runs /v/bin/python3, a Python of the environment the package is installed in",
        Evidence(Why.EDITABLE, "/x/python/sglang", f"{SITE}/__editable__.sglang-0.5.9.pth"):
            f"because its interpreter's site-packages hold the editable install of /x/python/sglang ({SITE}/__editable__.sglang-0.5.9.pth)",
        Evidence(Why.UNREADABLE, "/proc/4242/environ", "Permission denied"):
            "patchkit cannot tell whether it runs these files: /proc/4242/environ cannot be read (Permission denied)",
        Evidence(Why.TOO_LARGE, "/proc/4242/environ", str(1 << 20)):
            "patchkit cannot tell whether it runs these files: /proc/4242/environ is larger than the 1 MiB it reads",
    }
    assert {e.reason for e in said} == set(Why)
    assert {e: because(e) for e in said} == said


def test_restart_json_carries_the_reason_code_beside_the_sentence():
    doc = json.loads(json.dumps(restart_json([ONE, TWO])))
    assert doc == [
        {"pid": 1234, "cmdline": "/v/bin/python -m sglang.launch_server --port 30000", "started_ns": 7,
         "reason": "pythonpath", "evidence": "/x/python", "detail": "", "why": "because its PYTHONPATH has /x/python"},
        {"pid": 1240, "cmdline": "/v/bin/vllm serve", "started_ns": 8, "reason": "interpreter", "evidence": "/v/bin/python",
         "detail": "", "why": "because it runs /v/bin/python, a Python of the environment the package is installed in"},
    ]
