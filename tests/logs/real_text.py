"""Server logs built from real text only.

- SGLang's log format: configure_logger in sglang/srt/utils/common.py (0.5.9):
  "[%(asctime)s{prefix}] %(message)s", datefmt "%Y-%m-%d %H:%M:%S", prefix " TP3" per rank.
- Each SGLang line is a format string of the release (0.5.9 file named beside it); the numbers
  in it are this log's.  Tracebacks are Python's format ("Traceback (most recent call last):",
  '  File "...", line N, in f', the source line), each frame's file, line and code that of
  the release named (SGLang 0.5.9, FlashInfer 0.6.4, CPython 3.11.7); frames between are left
  out where it says "abridged".
- The innermost frame and the exception of the KeyError: 12 are the real run on an H200
  (data/h200-sglang-0.5.9-flashinfer-0.6.4.log, SGLang 0.5.9's torch_symm_mem.py line 83),
  FlashInfer's "[9, 10]" message is that run's and flashinfer/compilation_context.py's (0.6.4).
"""

from __future__ import annotations

TS = "2026-02-11 10:03:02"

# SGLang 0.5.9: model_runner.py ("Init torch distributed begin.", "Load weight begin. avail mem=",
# "Load weight end. elapsed=... s, type=..., dtype=..., avail mem=... GB, mem usage=... GB.",
# "Capture cuda graph begin. This can take up to several minutes. avail mem=... GB",
# "Capture cuda graph end. Time elapsed: ... s. mem usage=... GB. avail mem=... GB."),
# mem_cache/memory_pool.py ("KV Cache is allocated. #tokens: ..., K size: ... GB, V size: ... GB"),
# model_runner_kv_cache_mixin.py ("Memory pool end. avail mem=... GB"),
# cuda_graph_runner.py ("Capture cuda graph bs [...]").
START = [
    "[2026-02-11 10:02:41 TP0] Init torch distributed begin.",
    "[2026-02-11 10:02:41 TP1] Init torch distributed begin.",
]
LOAD = [
    "[2026-02-11 10:02:44 TP0] Load weight begin. avail mem=93.17 GB",
    "[2026-02-11 10:02:44 TP1] Load weight begin. avail mem=93.17 GB",
    "[2026-02-11 10:03:01 TP0] Load weight end. elapsed=16.92 s, type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=77.95 GB, mem usage=15.22 GB.",
    "[2026-02-11 10:03:01 TP1] Load weight end. elapsed=16.95 s, type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=77.95 GB, mem usage=15.22 GB.",
    "[2026-02-11 10:03:02 TP0] KV Cache is allocated. #tokens: 1048576, K size: 36.00 GB, V size: 36.00 GB",
    "[2026-02-11 10:03:02 TP0] Memory pool end. avail mem=5.12 GB",
]
CAPTURE = [
    "[2026-02-11 10:03:03 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=4.98 GB",
    "[2026-02-11 10:03:03 TP0] Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32]",
]
CAPTURED = ["[2026-02-11 10:03:13 TP0] Capture cuda graph end. Time elapsed: 9.87 s. mem usage=0.51 GB. avail mem=4.47 GB."]
# SGLang 0.5.9 http_server.py line 1836; uvicorn's access line as SGLang issue threads show it (PR 18341).
READY = ["[2026-02-11 10:03:20] The server is fired up and ready to roll!"]
ACCESS = '[2026-02-11 10:03:21] INFO:     127.0.0.1:53498 - "GET /model_info HTTP/1.1" 200 OK'
# scheduler_metrics_mixin.py (0.5.9): f"Decode batch, #running-req: ..., #token: ..., token usage: ...,
# cuda graph: ..., gen throughput (token/s): ..., #queue-req: ..."
DECODE = "[2026-02-11 10:05:12 TP0] Decode batch, #running-req: 12, #token: 5312, token usage: 0.01, cuda graph: True, gen throughput (token/s): 841.26, #queue-req: 0"
# SGLang 0.5.9 torch_symm_mem.py lines 101-104, one line per rank.
MULTICAST = [
    "[2026-02-11 10:03:02 TP0] TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported.",
    "[2026-02-11 10:03:02 TP1] TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported.",
]
# SGLang 0.5.14 - 0.5.23 torch_symm_mem.py (the .get lookup); 0.5.23 lines 80-84.
CAPABILITY_OFF = ["[2026-02-11 10:03:02 TP0] TorchSymmMemCommunicator: Device capability 12 not supported, communicator is not available."]
# SGLang 0.5.9 engine.py line 869 (launch_phase_sigquit_handler).
CHILD_FAILED = "[2026-02-11 10:03:02] Received sigquit from a child process. It usually means the child failed."

# uvicorn's own lines as it serves (uvicorn 0.55: server.py "Started server process [%d]", lifespan/on.py
# "Waiting for application startup." and "Application startup complete.", config.py "Uvicorn running on
# %s://%s:%d (Press CTRL+C to quit)"), in SGLang 0.5.9's format for them (utils/common.py
# set_uvicorn_logging_configs: "[%(asctime)s] %(levelprefix)s %(message)s", the level padded to 9 as
# uvicorn's levelprefix is).  SGLang starts its warm-up thread in the app's lifespan (http_server.py
# lines 348-352): these lines come before the warm-up request and "The server is fired up".
UVICORN = [
    "[2026-02-11 10:03:14] INFO:     Started server process [1184]",
    "[2026-02-11 10:03:14] INFO:     Waiting for application startup.",
    "[2026-02-11 10:03:14] INFO:     Application startup complete.",
    "[2026-02-11 10:03:14] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
]
# SGLang 0.5.9 tokenizer_manager.py line 2507: running_phase_sigquit_handler, called by the event loop's
# signal handler without arguments (signum and frame None), once the HTTP server runs.
SIGQUIT_RUNNING = "[2026-02-11 10:03:23] SIGQUIT received. signum=None, frame=None. It usually means one child failed."

# A vLLM 0.11.0 API server's lines: every line of the process prefixed by decorate_logs
# (utils/__init__.py _add_prefix: f"{CYAN}({worker_name} pid={pid}){RESET} ", CYAN "\033[1;36m",
# RESET "\033[0;0m"), vLLM's records "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"
# with "%m-%d %H:%M:%S" (logger.py), api_server.py lines 1839 and 1912, launcher.py line 34, then
# uvicorn's lines in uvicorn's own format ("%(levelprefix)s %(message)s").  vLLM serves once its
# engine is built: uvicorn's "Application startup complete." is its ready line.
VLLM_PREFIX = "\033[1;36m(APIServer pid=4121)\033[0;0m "
VLLM_SERVE = [VLLM_PREFIX + line for line in (
    "INFO 02-11 10:05:31 [api_server.py:1839] vLLM API server version 0.11.0",
    "INFO 02-11 10:06:12 [api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000",
    "INFO 02-11 10:06:12 [launcher.py:34] Available routes are:",
    "INFO:     Started server process [4121]",
    "INFO:     Waiting for application startup.",
    "INFO:     Application startup complete.",
)]


def to_model_runner(site: str) -> str:
    """The frames of SGLang 0.5.9's scheduler process from run_scheduler_process to the ModelRunner it
    builds (scheduler.py lines 3130, 368, 564, 522; tp_worker.py line 330), SGLang's package in ``site``."""
    return "".join(f'  File "{site}/sglang/srt/{path}", line {line}, in {func}\n    {code}\n' for path, line, func, code in (
        ("managers/scheduler.py", 3130, "run_scheduler_process", "scheduler = Scheduler("),
        ("managers/scheduler.py", 368, "__init__", "self.init_model_worker()"),
        ("managers/scheduler.py", 564, "init_model_worker", "self.init_tp_model_worker()"),
        ("managers/scheduler.py", 522, "init_tp_model_worker", "self.tp_worker = TpModelWorker("),
        ("managers/tp_worker.py", 330, "__init__", "self._model_runner = ModelRunner("),
    ))


# scheduler.py line 3190: logger.error(f"Scheduler hit an exception: {traceback}"), the traceback
# ending in a newline (a blank line follows).  A checkout at /root/sglang; frames from 0.5.9.
KEYERROR = [f"[{TS} TP3] Scheduler hit an exception: Traceback (most recent call last):"] + (to_model_runner('/root/sglang/python') + """  File "/root/sglang/python/sglang/srt/model_executor/model_runner.py", line 392, in __init__
    min_per_gpu_memory = self.init_torch_distributed()
  File "/root/sglang/python/sglang/srt/model_executor/model_runner.py", line 812, in init_torch_distributed
    initialize_model_parallel(
  File "/root/sglang/python/sglang/srt/distributed/parallel_state.py", line 1676, in initialize_model_parallel
    _TP = init_model_parallel_group(
  File "/root/sglang/python/sglang/srt/distributed/parallel_state.py", line 1379, in init_model_parallel_group
    return GroupCoordinator(
  File "/root/sglang/python/sglang/srt/distributed/parallel_state.py", line 384, in __init__
    self.torch_symm_mem_comm = TorchSymmMemCommunicator(
  File "/root/sglang/python/sglang/srt/distributed/device_communicators/torch_symm_mem.py", line 83, in __init__
    not in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability]
           ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~^^^^^^^^^^^^^^^^^^^^^^^^
KeyError: 12
""").split("\n")

# A logger.error call down to its handler's emit, in CPython 3.11.7's logging/__init__.py (error 1518,
# _log 1634, handle 1644, callHandlers 1706, Handler.handle 978).
PY311 = "/root/.pyenv/versions/3.11.7/lib/python3.11"
LOGGER_ERROR = "".join(f'  File "{PY311}/logging/__init__.py", line {line}, in {func}\n    {code}\n' for line, func, code in (
    (1518, "error", "self._log(ERROR, msg, args, **kwargs)"),
    (1634, "_log", "self.handle(record)"),
    (1644, "handle", "self.callHandlers(record)"),
    (1706, "callHandlers", "hdlr.handle(record)"),
    (978, "handle", "self.emit(record)"),
))

# The main process, after a scheduler died: engine.py 0.5.9 _wait_for_scheduler_ready (line 894
# recv() raises EOFError, line 896 logger.error) while the SIGQUIT of launch_phase_sigquit_handler
# (line 869, logger.error) lands inside that write to stderr: CPython 3.11.7's logging
# (__init__.py: emit 1113 and 1118, handleError 1031, error 1518, _log 1634, handle 1644,
# callHandlers 1706, Handler.handle 978) and multiprocessing/connection.py (250, 430, 399),
# uncaught.  The text of the error is CPython's (Modules/_io/bufferedio.c "reentrant call inside
# %R"), as the logging tracebacks of other servers show it (gunicorn issue 2816).  Over fifty lines.
LOGGING_TAIL = ("""Traceback (most recent call last):
  File "/root/sglang/python/sglang/srt/entrypoints/engine.py", line 894, in _wait_for_scheduler_ready
    data = scheduler_pipe_readers[i].recv()
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", line 250, in recv
    buf = self._recv_bytes()
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", line 430, in _recv_bytes
    buf = self._recv(4)
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", line 399, in _recv
    raise EOFError
EOFError

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/logging/__init__.py", line 1113, in emit
    stream.write(msg + self.terminator)
RuntimeError: reentrant call inside <_io.BufferedWriter name='<stderr>'>

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "<frozen runpy>", line 88, in _run_code
  File "/root/sglang/python/sglang/launch_server.py", line 35, in <module>
    run_server(server_args)
  File "/root/sglang/python/sglang/launch_server.py", line 28, in run_server
    launch_server(server_args)
  File "/root/sglang/python/sglang/srt/entrypoints/http_server.py", line 1894, in launch_server
    _launch_subprocesses(
  File "/root/sglang/python/sglang/srt/entrypoints/engine.py", line 1084, in _launch_subprocesses
    scheduler_infos = _wait_for_scheduler_ready(scheduler_pipe_readers, scheduler_procs)
  File "/root/sglang/python/sglang/srt/entrypoints/engine.py", line 896, in _wait_for_scheduler_ready
    logger.error(
""" + LOGGER_ERROR + """  File "/root/.pyenv/versions/3.11.7/lib/python3.11/logging/__init__.py", line 1113, in emit
    stream.write(msg + self.terminator)
  File "/root/sglang/python/sglang/srt/entrypoints/engine.py", line 869, in launch_phase_sigquit_handler
    logger.error(
""" + LOGGER_ERROR + """  File "/root/.pyenv/versions/3.11.7/lib/python3.11/logging/__init__.py", line 1118, in emit
    self.handleError(record)
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/logging/__init__.py", line 1031, in handleError
    sys.stderr.write('--- Logging error ---\\n')
RuntimeError: reentrant call inside <_io.BufferedWriter name='<stderr>'>""").split("\n")

# SGLang issue 15650: an installed SGLang 0.5.9 (/usr/local/lib/python3.12/dist-packages, the
# image's layout) turned the FlashInfer all-reduce fusion on; FlashInfer 0.6.4 raised its "[9, 10]"
# RuntimeError during CUDA graph capture and cuda_graph_runner.py (lines 368-374) wrapped it:
# raise Exception(f"Capture cuda graph failed: {e}\\n{CUDA_GRAPH_CAPTURE_FAILED_MSG}").  Frames
# abridged (the capture's model forward, between cuda_graph_runner.py and layernorm.py, left
# out); the message's last line (an address to open an issue) left out.
FUSION = [f"[{TS} TP0] Scheduler hit an exception: Traceback (most recent call last):"] + ("""  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 370, in __init__
    self.capture()
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/layernorm.py", line 318, in forward_with_allreduce_fusion
    fused_result = flashinfer_allreduce_residual_rmsnorm(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/flashinfer_comm_fusion.py", line 181, in flashinfer_allreduce_residual_rmsnorm
    if not ensure_workspace_initialized(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/flashinfer_comm_fusion.py", line 112, in ensure_workspace_initialized
    _workspace_manager.initialize(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/flashinfer_comm_fusion.py", line 58, in initialize
    comm.trtllm_create_ipc_workspace_for_all_reduce_fusion(
  File "/usr/local/lib/python3.12/dist-packages/flashinfer/comm/trtllm_ar.py", line 619, in trtllm_create_ipc_workspace_for_all_reduce_fusion
    trtllm_lamport_initialize(
  File "/usr/local/lib/python3.12/dist-packages/flashinfer/comm/trtllm_ar.py", line 729, in trtllm_lamport_initialize
    get_trtllm_comm_module().trtllm_lamport_initialize(buffer_ptr, size, dtype)
  File "/usr/local/lib/python3.12/dist-packages/flashinfer/comm/trtllm_ar.py", line 101, in get_trtllm_comm_module
    module = gen_trtllm_comm_module().build_and_load()
  File "/usr/local/lib/python3.12/dist-packages/flashinfer/jit/comm.py", line 60, in gen_trtllm_comm_module
    nvcc_flags = current_compilation_context.get_nvcc_flags_list(
  File "/usr/local/lib/python3.12/dist-packages/flashinfer/compilation_context.py", line 62, in get_nvcc_flags_list
    raise RuntimeError(
RuntimeError: No supported CUDA architectures found for major versions [9, 10].

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
""" + to_model_runner('/usr/local/lib/python3.12/dist-packages') + """  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 413, in __init__
    self.initialize(min_per_gpu_memory)
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 609, in initialize
    self.init_device_graphs()
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 2156, in init_device_graphs
    self.graph_runner = graph_runners[self.device](self)
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 372, in __init__
    raise Exception(
Exception: Capture cuda graph failed: No supported CUDA architectures found for major versions [9, 10].
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
3. disable torch compile by not using --enable-torch-compile
4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)

""").split("\n")

# The traceback SGLang re-raised it in, alone (FUSION's last part, cuda_graph_runner.py only: no FlashInfer
# frame), its exception line the one SGLang issue 15650 posts (data/sglang-issue-15650.log): a log that kept
# only the last traceback of the chain.
FUSION_RERAISED = [FUSION[0]] + FUSION[FUSION.index("Traceback (most recent call last):") + 1:]

# SGLang issues 7249 (RTX 5090) and 9600 (RTX 5060): sgl-kernel's rmsnorm (sgl_kernel/elementwise.py
# line 45: torch.ops.sgl_kernel.rmsnorm.default(...)) during CUDA graph capture.  SGLang 0.5.9 in
# /opt/venv (layernorm.py line 148); frames abridged (the model forward, and the capture's own
# frames between cuda_graph_runner.py and layernorm.py); the exception is the issues' title.
NO_KERNEL = [f"[{TS} TP0] Scheduler hit an exception: Traceback (most recent call last):"] + """  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 370, in __init__
    self.capture()
  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/layers/layernorm.py", line 148, in forward_cuda
    out = rmsnorm(x, self.weight.data, self.variance_epsilon)
  File "/opt/venv/lib/python3.11/site-packages/sgl_kernel/elementwise.py", line 45, in rmsnorm
    torch.ops.sgl_kernel.rmsnorm.default(out, input, weight, eps, enable_pdl)
RuntimeError: RMSNorm failed with error code no kernel image is available for execution on the device
""".split("\n")

# The same missing kernel in the warm-up request instead (a start with --disable-cuda-graph: the first
# forward is the warm-up's prefill): the scheduler's event loop down to the model, SGLang 0.5.9's lines
# (scheduler.py 3169, 1165, 2328; tp_worker.py 456; model_runner.py 2401, 2500, 2338), then the
# model's forward abridged, and layernorm.py and sgl_kernel's frames and the exception of NO_KERNEL.
# torch's decorate_context frames (the event loop's DynamicGradMode) left out.
_SITE = "/opt/venv/lib/python3.11/site-packages"
WARMUP_NO_KERNEL = ["[2026-02-11 10:03:22 TP0] Scheduler hit an exception: Traceback (most recent call last):"] + ("".join(
    f'  File "{_SITE}/sglang/srt/{path}", line {line}, in {func}\n    {code}\n' for path, line, func, code in (
        ("managers/scheduler.py", 3169, "run_scheduler_process", "scheduler.event_loop_overlap()"),
        ("managers/scheduler.py", 1165, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
        ("managers/scheduler.py", 2328, "run_batch", "batch_result = self.model_worker.forward_batch_generation("),
        ("managers/tp_worker.py", 456, "forward_batch_generation", "out = self.model_runner.forward("),
        ("model_executor/model_runner.py", 2401, "forward", "output = self._forward_raw("),
        ("model_executor/model_runner.py", 2500, "_forward_raw", "ret, can_run_graph = self.forward_extend("),
        ("model_executor/model_runner.py", 2338, "forward_extend", "self.model.forward("),
    )) + "\n".join(NO_KERNEL[3:])).split("\n")

# SGLang issue 5095: a checkpoint whose weights the model does not know (llama.py load_weights,
# 0.5.9 line 656), in /opt/venv.  Not an SM120 failure.
UNRELATED = [f"[{TS} TP0] Scheduler hit an exception: Traceback (most recent call last):"] + (to_model_runner('/opt/venv/lib/python3.11/site-packages') + """  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/model_executor/model_runner.py", line 413, in __init__
    self.initialize(min_per_gpu_memory)
  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/model_executor/model_runner.py", line 493, in initialize
    self.load_model()
  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/model_executor/model_runner.py", line 980, in load_model
    self.model = self.loader.load_model(
  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/model_loader/loader.py", line 677, in load_model
    self.load_weights_and_postprocess(
  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/model_loader/loader.py", line 686, in load_weights_and_postprocess
    model.load_weights(weights)
  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/models/llama.py", line 656, in load_weights
    param = params_dict[name]
KeyError: 'model.layers.55.mlp.gate_up_proj.input_scale'
""").split("\n")


def log(*parts: list[str] | str) -> bytes:
    """The lines of parts (lists of lines, or single lines) as a log's bytes."""
    lines: list[str] = []
    for part in parts:
        lines += [part] if isinstance(part, str) else part
    return "".join(line + "\n" for line in lines).encode()
