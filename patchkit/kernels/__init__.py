"""The compiled CUDA code of shared objects, as a source of facts: which GPUs each can run on.

``fatbin.py`` reads an ELF file's fat binaries (section headers, then the container and entry
headers, seeking past every payload); ``compat.py`` says which compute capabilities an entry
runs on, by NVIDIA's compatibility rules; ``installed.py`` finds the shared objects of the
distributions installed in site-packages folders through their dist-info RECORDs.  Nothing
here loads or runs a shared object.
"""
