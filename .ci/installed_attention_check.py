"""The fused attention of an installed wavepe, forward and backward, against plain PyTorch (float64).

    ENV/bin/python .ci/installed_attention_check.py ORIGIN_PREFIX

Run by .ci/check_wheel.sh and .ci/check_install.sh with a fresh environment's python, from outside
the source tree: wavepe must be the installed copy, and its torch ops must have come from where the
caller expects (``wavepe.ops._extension.ORIGIN`` starts with ORIGIN_PREFIX).
"""
import sys

import torch

import wavepe
import wavepe.ops as wo
from wavepe.ops import _extension

assert "site-packages" in wavepe.__file__, wavepe.__file__
assert _extension.ORIGIN.startswith(sys.argv[1]), _extension.ORIGIN
torch.manual_seed(0)
B, H, H_kv, L, d = 2, 4, 2, 37, 16
q = torch.randn(B, H, L, d, dtype=torch.float64, requires_grad=True)
k = torch.randn(B, H_kv, L, d, dtype=torch.float64, requires_grad=True)
v = torch.randn(B, H_kv, L, d, dtype=torch.float64, requires_grad=True)
cfg = wavepe.WaveletConfig.grid(d)
out = wo.wavelet_attention(q, k, v, cfg)
grads = torch.autograd.grad(out.sum(), (q, k, v))
# plain PyTorch: softmax(scale * (q k^T + bias)) v with the causal mask, bias from the bias op
kr, vr = k.repeat_interleave(H // H_kv, 1), v.repeat_interleave(H // H_kv, 1)
scores = (q @ kr.transpose(-1, -2) + wo.wavelet_bias(q, cfg)) / d ** 0.5
scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
ref = torch.softmax(scores, -1) @ vr
ref_grads = torch.autograd.grad(ref.sum(), (q, k, v))
torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
for g, r in zip(grads, ref_grads):
    torch.testing.assert_close(g, r, rtol=1e-9, atol=1e-9)
print(f"fused attention forward + backward ok (torch {torch.__version__}, ops {_extension.ORIGIN})")
