"""patchkit: generate, apply and upstream capability-table patches for SGLang."""

__version__ = "0.1.0"
