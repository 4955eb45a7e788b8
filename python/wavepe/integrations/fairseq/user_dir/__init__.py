"""Holds the fairseq user dir ``wavepe_fairseq`` (a package so that wheels ship it).

fairseq puts this directory on ``sys.path`` and imports ``wavepe_fairseq``
from it; nothing else lives here, so nothing else becomes importable.
"""
