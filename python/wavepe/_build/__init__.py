"""How wavepe's compiled parts are built: :mod:`.recipe` (sources, per-file flags, the incremental
driver; shared with setup.py and the Makefile) and :mod:`.jit` (compiling wavepe._C at first use
against the installed torch, when the package was built without it)."""
