"""The tests' helpers and the maintainers' tools, not shipped (``from support.cli import invoke``):

- repos.py: git repositories in the shape of SGLang's releases, built inside the tests; git with a fixed identity
- cli.py: patchkit's command line in a separate process (``run_cli``) or in the test's own (``invoke``)
- venvs.py: virtualenvs of the tests' interpreter, wheels installed by pip, copies of them
- procs.py: processes the tests start and look at (servers patchkit reports)
- crash.py: the world of the crash and race tests and the reliability suite
- prebuilt.py: what a test session builds once and every test shares (release mirrors, virtualenvs, build backends)
- mirror.py, index.py: git histories of real releases from PyPI (``PYTHONPATH=tests python -m support.mirror``)
- image.py: SGLang's official-image layout (a shallow clone installed editable), for the tests and make bench
- released.py: one file of a released wheel, read in parts from the index and kept; ranges.py: a local index serving them
- check_releases.py: make check-releases, the failure modes' bounds against the newest releases on the index
"""
