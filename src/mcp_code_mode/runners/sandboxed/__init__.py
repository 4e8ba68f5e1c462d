"""The program a Python worker runs inside its sandbox (``worker.py`` and its two sibling modules).

The server never imports these: they are started as a script, standard library only (plus
smolagents' interpreter for the local runner), and see nothing of the package.
"""
