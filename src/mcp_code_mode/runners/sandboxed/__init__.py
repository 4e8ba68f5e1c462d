"""The program a Python worker runs inside its sandbox (``worker.py`` and its sibling ``cm_*`` modules).

They are started as a script, standard library only (plus smolagents' interpreter for the local runner),
and see nothing of the package. The server imports only ``cm_constructs`` (pure ``ast``: what the local
runner refuses, for ``validate_code``).
"""
