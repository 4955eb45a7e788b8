"""fairseq ``--user-dir`` entry point of wavepe: registers the ``wavepe_lm`` model and its architectures.

fairseq imports this directory as the top-level module ``wavepe_fairseq``;
the code lives in :mod:`wavepe.integrations.fairseq.model`, imported once
whatever name this module is imported under.
"""

from wavepe.integrations.fairseq import model  # noqa: F401  (registration happens on import)
