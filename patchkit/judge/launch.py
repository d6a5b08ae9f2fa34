"""The server's command line (``doctor -- CMD``) as the conditions of the failure modes: what it
states, what it rules out, what it leaves open.  The model's ``config.json`` is read where the
model is a local folder (bounded, as JSON; nothing of the model is run).

Flags are read as SGLang and vLLM spell them (``--tp-size``, ``--tensor-parallel-size``, ``-tp``;
``--kv-cache-dtype``; ``--quantization``; ``--model-path``, ``--model``, ``vllm serve MODEL``).
"""

from __future__ import annotations

from pathlib import Path

from patchkit.bounded import load_json, read_file
from patchkit.errors import BadInput
from patchkit.fixes.modes import Condition
from patchkit.values import Value

_CONFIG_MAX = 1 << 20  # a model's config.json
_VALUE_FLAGS = {"--tp-size", "--tp", "--tensor-parallel-size", "-tp", "--kv-cache-dtype", "--quantization", "-q",
                "--model-path", "--model", "--attention-backend", "--moe-backend", "--moe-runner-backend",
                "--nnodes", "--pipeline-parallel-size", "--dtype"}
_FP4 = ("fp4", "nvfp4", "modelopt_fp4", "mxfp4")
_FP8 = ("fp8", "w8a8_fp8", "modelopt_fp8", "fbgemm_fp8", "ptpc_fp8")
_SPARSE_MLA = ("DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM", "GlmMoeDsaForCausalLM")
_MLA = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK2ForCausalLM", *_SPARSE_MLA)


class Launch(Value):
    """What a server's command line says of the conditions: ``holds`` True, False, or None (open)."""

    words: tuple[str, ...]
    options: dict[str, str]  # flag -> value, as written (the last one wins)
    switches: frozenset[str]  # flags given without a value
    model: str | None
    config: dict[str, object] | None  # the local model's config.json
    known: dict[Condition, bool]

    def holds(self, condition: Condition) -> bool | None:
        return self.known.get(condition)


def _split(words: tuple[str, ...]) -> tuple[dict[str, str], frozenset[str], list[str]]:
    options: dict[str, str] = {}
    switches: set[str] = set()
    positional: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            name, eq, value = word.partition("=")
            if eq:
                options[name] = value
            elif name in _VALUE_FLAGS and i + 1 < len(words):
                options[name] = words[i + 1]
                i += 1
            else:
                switches.add(name)
        else:
            positional.append(word)
        i += 1
    return options, frozenset(switches), positional


def _model(options: dict[str, str], positional: list[str]) -> str | None:
    for flag in ("--model-path", "--model"):
        if flag in options:
            return options[flag]
    if "serve" in positional:  # vllm serve MODEL
        rest = positional[positional.index("serve") + 1:]
        return rest[0] if rest else None
    return None


def _config(model: str | None, cwd: Path) -> dict[str, object] | None:
    if model is None:
        return None
    path = (cwd / model / "config.json") if not Path(model).is_absolute() else Path(model) / "config.json"
    if not path.is_file():
        return None  # a hub name, or a folder without one: the model's facts stay open
    try:
        doc = load_json(read_file(path, _CONFIG_MAX, "model's config.json"))
    except ValueError as exc:
        raise BadInput(str(path), f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BadInput(str(path), "not a JSON object: a model's config.json is one")
    return doc


def _quant(options: dict[str, str], config: dict[str, object] | None) -> str | None:
    if "--quantization" in options or "-q" in options:
        return (options.get("--quantization") or options.get("-q") or "").lower()
    q = config.get("quantization_config") if config else None
    if isinstance(q, dict):
        method, algo = str(q.get("quant_method", "")).lower(), str(q.get("quant_algo", "")).lower()
        return algo if algo else method
    return None if config is None else ""


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def read_launch(words: tuple[str, ...], cwd: Path) -> Launch:
    """The conditions ``words`` (the server's command line) state or rule out."""
    options, switches, positional = _split(words)
    model = _model(options, positional)
    config = _config(model, cwd)
    known: dict[Condition, bool] = {}
    tp = next((_int(options[f]) for f in ("--tp-size", "--tp", "--tensor-parallel-size", "-tp") if f in options), 1)
    known[Condition.TENSOR_PARALLEL] = bool(tp and tp > 1)
    known[Condition.MULTI_NODE] = (_int(options.get("--nnodes")) or 1) > 1
    kv = options.get("--kv-cache-dtype")
    known[Condition.FP8_KV] = kv is not None and kv.lower().startswith("fp8")
    if "--disable-custom-all-reduce" in switches:
        known[Condition.CUSTOM_ALL_REDUCE] = False
    backend = options.get("--attention-backend")
    if backend is not None:  # another backend named rules the TRT-LLM kernels out; none named leaves the choice open
        known[Condition.TRTLLM_ATTENTION] = "trtllm" in backend.lower()
        known[Condition.FLASHINFER_ATTENTION] = "flashinfer" in backend.lower()
    if "--enable-flashinfer-allreduce-fusion" in switches:
        known[Condition.ALLREDUCE_FUSION] = True  # (without it, a release may turn the fusion on by itself: open)
    if "--no-enable-flashinfer-autotune" in switches:
        known[Condition.AUTOTUNE] = False
    quant = _quant(options, config)
    if quant is not None:
        fp4, fp8 = any(q in quant for q in _FP4), any(q in quant for q in _FP8)
        moe = None if config is None else any(k in config for k in ("num_experts", "n_routed_experts", "num_local_experts"))
        known[Condition.FP4_GEMM] = fp4
        known[Condition.FP8_GEMM] = fp8
        known[Condition.MXFP4] = "mxfp4" in quant
        if moe is not None or not (fp4 or fp8):
            known[Condition.FP4_MOE] = bool(moe and fp4)
            known[Condition.FP8_MOE] = bool(moe and fp8)
    if config is not None:
        arch = config.get("architectures") or []
        names = [a for a in arch if isinstance(a, str)] if isinstance(arch, list) else []
        known[Condition.SPARSE_MLA] = any(a in _SPARSE_MLA for a in names)
        known[Condition.MLA] = any(a in _MLA for a in names)
        inner = config.get("text_config")
        text = inner if isinstance(inner, dict) else config
        known[Condition.HEAD_DIM_512] = any(text.get(k) == 512 for k in ("head_dim", "global_head_dim"))
    return Launch(words, options, switches, model, config, known)
