"""One module per command: each returns values; ``patchkit.main`` prints them."""
