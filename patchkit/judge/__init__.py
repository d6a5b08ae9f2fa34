"""Judging against this machine: what its GPUs need of a target's fixes (``here``), the keys
``--to-cc auto`` gives the ordinary commands (``auto``), the speedups known for it
(``speedups``), and whether compiled CUDA code runs on its GPUs (``kernels``).  Read only."""
