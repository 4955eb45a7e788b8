"""wavepe's research code: what the train-short/test-long studies and the
frequency-band analysis are made of, kept apart from the library.

* :mod:`wavepe.research.analysis` -- the RoPE frequency band: predicted from
  θ and the training length, measured on a model; p-RoPE;
* :mod:`wavepe.research.experiments` -- corpora, TinyLM, training,
  perplexity by length, the extrapolation runner, figures;
* :mod:`wavepe.research.cli` -- the ``wavepe`` command.

Dependencies run one way: the CLI uses the experiments, the experiments use
the analysis, all of them use the library (config, ufuncs, ops, nn,
integrations), and the library imports none of this package.  The old import
paths ``wavepe.analysis``, ``wavepe.experiments`` and ``wavepe.cli`` still
work (they are this package under its old names).
"""
