"""Maintainers' tools for the tests and make bench, not shipped: release mirrors from PyPI
(mirror.py, index.py) and SGLang's official-image layout (image.py)."""
