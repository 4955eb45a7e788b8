"""How wavepe's compiled parts are built: :mod:`.recipe` (sources, per-file flags, the incremental
driver; shared with setup.py and the Makefile) and :mod:`.jit` (compiling the torch ops at first use
against the installed torch, when the package holds none: the fallback where no wheel fits)."""
