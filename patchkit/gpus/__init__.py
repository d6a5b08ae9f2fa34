"""This machine's NVIDIA GPUs, as ``nvidia-smi`` reports them (``smi.py`` runs it, ``parse.py`` reads it)."""
