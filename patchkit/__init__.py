"""patchkit: generate, apply, verify, revert and upstream the source patches that let SGLang,
FlashInfer and vLLM run on NVIDIA's Blackwell workstation GPUs (compute capability 12.0, SM120:
RTX PRO 6000; 12.1, SM121: DGX Spark GB10), and say what a machine's GPUs, a server's log and
an environment's compiled kernels need."""

__version__ = "0.1.0"
