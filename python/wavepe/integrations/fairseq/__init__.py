"""fairseq plugin: ``--pos-enc wavelet`` (and rope, alibi, sinusoidal, nope) on stock fairseq 0.12.2.

Load it with ``--user-dir``; ``wavepe fairseq-user-dir`` prints the path::

    fairseq-train data-bin --task language_modeling --user-dir "$(wavepe fairseq-user-dir)" \\
        --arch wavepe_lm --pos-enc wavelet ...

It registers the model ``wavepe_lm`` with the architectures ``wavepe_lm``
(shaped like fairseq's ``transformer_lm``) and ``wavepe_lm_wiki103`` (shaped
like ``transformer_lm_wiki103``, the ALiBi / wavelet papers' WikiText-103
model).  Their decoder self-attention projects q, k, v like fairseq's and
calls :func:`wavepe.ops.wavelet_attention` (RoPE through :func:`wavepe.ops.rope`);
the options are listed in :mod:`wavepe.integrations.fairseq.options`.

fairseq imports a user dir by its directory name, and this package's name
(``fairseq``) would shadow fairseq itself; the user dir is therefore the
uniquely named package ``user_dir/wavepe_fairseq`` next to this file, which
only imports :mod:`wavepe.integrations.fairseq.model`.

Importing this package imports neither fairseq nor torch.
"""

from __future__ import annotations

import os

__all__ = ["user_dir"]


def user_dir() -> str:
    """Absolute path to pass to fairseq's ``--user-dir``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "user_dir", "wavepe_fairseq")
