"""One module per command: each returns values; ``patchkit.cli`` prints them."""
