"""Float64 NumPy oracles, written straight from the formulas (docs/DEVELOPING.md, "API contracts").

Deliberately naive: explicit loops or direct broadcasting, no cleverness, no
wavepe code.  Every kernel variant is compared against these.

The slow ones (the loops of the relative-table bias, the attention oracles) remember their last results,
keyed by the exact bytes, dtype and shape of every array argument and the value of every other one:
a test run once per ISA asks the same oracle the same question once per ISA, and the answer does not
depend on the ISA.  Each call gets its own copy of the answer.
"""

from __future__ import annotations

import collections
import copy
import functools
import hashlib

import numpy as np


def _key_part(x):
    if isinstance(x, (np.ndarray, np.generic)) or type(x).__module__.startswith("torch"):
        a = np.ascontiguousarray(np.asarray(x))
        return ("array", a.dtype.str, a.shape, hashlib.blake2b(a.view(np.uint8).reshape(-1), digest_size=20).digest())
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, *map(_key_part, x))
    if isinstance(x, (int, float, bool, str, type(None))):
        return (type(x).__name__, repr(x))
    raise TypeError(f"cannot key an oracle argument of type {type(x).__name__}")


def _remembered(fn, maxsize: int = 64):
    """fn with its last ``maxsize`` answers remembered (the key: _key_part of every argument)."""
    memo: collections.OrderedDict = collections.OrderedDict()

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            key = (_key_part(args), _key_part(sorted(kwargs.items())))
        except Exception:  # noqa: BLE001 -- an argument we cannot key exactly (e.g. a tensor needing grad): compute
            return fn(*args, **kwargs)
        if key in memo:
            memo.move_to_end(key)
        else:
            memo[key] = fn(*args, **kwargs)
            if len(memo) > maxsize:
                memo.popitem(last=False)
        return copy.deepcopy(memo[key])

    wrapper.memo = memo
    return wrapper


# ---- wavelets ---------------------------------------------------------------

def psi(family: str, t) -> np.ndarray:
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if family == "haar":
            out = np.where((t >= 0) & (t < 0.5), 1.0, np.where((t >= 0.5) & (t < 1.0), -1.0, 0.0))
            return np.where(np.isnan(t), np.nan, out)
        env = np.exp(-(t * t) / 2.0)
        if family == "ricker":
            val = (1.0 - t * t) * env
        elif family == "gaussian":
            val = -t * env
        elif family == "morlet":
            val = np.cos(5.0 * t) * env
        else:
            raise ValueError(family)
        return np.where(env == 0.0, np.where(np.isnan(t), np.nan, 0.0), val)


def wavelet_table(family: str, scales, shifts, r_values, normalize: bool = False) -> np.ndarray:
    """T[i, j] = psi((r_i - b_j) / a_j) (/ sqrt(a_j)), (len(r), d), float64."""
    a = np.asarray(scales, np.float64)
    b = np.asarray(shifts, np.float64)
    r = np.asarray(r_values, np.float64)
    table = psi(family, (r[:, None] - b[None, :]) / a[None, :])
    return table / np.sqrt(a)[None, :] if normalize else table


# ---- ALiBi and sinusoidal ---------------------------------------------------

def alibi_slopes(num_heads: int) -> np.ndarray:
    """Press et al.'s slopes, including the non-power-of-two interpolation."""
    def pow2(n):
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    p = 1
    while p * 2 <= num_heads:
        p *= 2
    slopes = pow2(p)
    if p < num_heads:
        slopes += pow2(2 * p)[0::2][: num_heads - p]
    return np.array(slopes)


def alibi_bias(slopes, q_len: int, k_len: int, q_offset: int, causal: bool) -> np.ndarray:
    slopes = np.asarray(slopes, np.float64)
    out = np.zeros((slopes.size, q_len, k_len))
    for h in range(slopes.size):
        for i in range(q_len):
            for j in range(k_len):
                dist = q_offset + i - j
                if causal:
                    out[h, i, j] = -slopes[h] * dist if dist >= 0 else 0.0
                else:
                    out[h, i, j] = -slopes[h] * abs(dist)
    return out


def sinusoidal_table(length: int, dim: int, offset: int = 0, base: float = 10000.0) -> np.ndarray:
    pos = np.arange(offset, offset + length, dtype=np.float64)[:, None]
    i = np.arange(dim)[None, :] // 2
    angle = pos / base ** (2.0 * i / dim)
    return np.where(np.arange(dim)[None, :] % 2 == 0, np.sin(angle), np.cos(angle))


# ---- relative-table bias ------------------------------------------------------

def _rel_row(r: int, r_lo: int, rows: int, causal: bool, clamp: bool) -> int | None:
    """The table row distance r reads, or None when it contributes nothing."""
    if causal and r < 0:
        return None
    t = r - r_lo
    if 0 <= t < rows:
        return t
    if not clamp:
        return None
    return 0 if t < 0 else rows - 1


def _rel_rows(m: int, k_len: int, q_offset: int, r_lo: int, rows: int, causal: bool, clamp: bool):
    """(the keys n of query row m that read a row, those rows): _rel_row(q_offset + m - n) for every n at once."""
    keys = np.arange(k_len)
    r = q_offset + m - keys
    t = r - r_lo
    ok = np.ones(k_len, bool) if clamp else (t >= 0) & (t < rows)
    if causal:
        ok &= r >= 0
    return keys[ok], np.clip(t, 0, rows - 1)[ok]


@_remembered
def rel_bias(q, table, r_lo: int, k_len: int, q_offset: int, causal: bool, clamp: bool) -> np.ndarray:
    """bias[..., m, n] = q[..., m, :] . T[t(q_offset + m - n)], float64, a query row at a time (_rel_row's rows)."""
    q = np.asarray(q, np.float64)
    table = np.asarray(table, np.float64)
    m_len = q.shape[-2]
    out = np.zeros(q.shape[:-1] + (k_len,))
    for m in range(m_len):
        keys, t = _rel_rows(m, k_len, q_offset, r_lo, table.shape[0], causal, clamp)
        out[..., m, keys] = q[..., m, :] @ table[t].T
    return out


@_remembered
def rel_bias_grads(grad, q, table, r_lo: int, q_offset: int, causal: bool, clamp: bool):
    """(dq, dT) of sum(grad * rel_bias(q, T)): dq[m] = sum_n grad[m,n] T[t], dT[t] = sum grad[m,n] q[m]."""
    grad = np.asarray(grad, np.float64)
    q = np.asarray(q, np.float64)
    table = np.asarray(table, np.float64)
    m_len, k_len = grad.shape[-2], grad.shape[-1]
    dq = np.zeros(q.shape)
    dt = np.zeros(table.shape)
    lead = int(np.prod(q.shape[:-2]))
    for m in range(m_len):
        keys, t = _rel_rows(m, k_len, q_offset, r_lo, table.shape[0], causal, clamp)
        g = grad[..., m, keys]  # (..., keys)
        dq[..., m, :] += g @ table[t]
        # dT[t[j]] += g[..., j] q[..., m, :] summed over the leading axes (a row repeats where the table is clamped)
        np.add.at(dt, t, g.reshape(lead, len(keys)).T @ q[..., m, :].reshape(lead, q.shape[-1]))
    return dq, dt


# ---- attention with a position bias ------------------------------------------

@_remembered
def attention(q, k, v, *, table=None, r_lo: int = 0, clamp: bool = False, slopes=None, causal: bool = True,
              scale: float | None = None, q_offset: int | None = None, key_padding_mask=None, window: int = 0,
              softcap: float = 0.0) -> np.ndarray:
    """softmax(s) v with every score materialised, float64 (docs/DEVELOPING.md, "Fused attention").

    q (B, H, M, d); k, v (B, Hkv, N, d), query head h uses kv head h // (H / Hkv).
    s[m, n] = scale * (q_m . k_n + q_m . T[r - r_lo]) with a table (zero row
    outside it, or the edge row with clamp), scale * q_m . k_n - slope_h |r|
    with ALiBi slopes; r = q_offset + m - n; with a soft-cap c > 0, s becomes
    c tanh(s / c).  Masked: n > pos_q (causal), |r| >= window (window > 0) and
    key_padding_mask[b, n] True.  A row with every key masked outputs 0.
    """
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b, h, m, d = q.shape
    n = k.shape[2]
    rep = h // k.shape[1]
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    if m == 0 or n == 0:
        return np.zeros((b, h, m, d))
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    off = n - m if q_offset is None else q_offset
    r = (off + np.arange(m))[:, None] - np.arange(n)[None, :]
    s = q @ k.swapaxes(-1, -2)  # (matmul: BLAS, where einsum ran its own loops: 2-13x the time)
    if table is not None:
        t = np.asarray(table, np.float64)
        rows = t.shape[0]
        idx = r - r_lo
        inside = (idx >= 0) & (idx < rows)
        if clamp:
            idx = np.clip(idx, 0, rows - 1)
            inside = np.ones_like(inside)
        g = q @ t.T  # q_m . T[row] for every table row
        picked = np.take_along_axis(g, np.broadcast_to(np.clip(idx, 0, max(rows - 1, 0)), (b, h, m, n)), axis=-1)
        s = s + np.where(inside, picked, 0.0)
    s = s * scale
    if slopes is not None:
        s = s - np.asarray(slopes, np.float64)[None, :, None, None] * np.abs(r)[None, None]
    if softcap:
        s = softcap * np.tanh(s / softcap)
    masked = np.zeros((b, 1, m, n), dtype=bool)
    if causal:
        masked |= (r < 0)[None, None]
    if window:
        masked |= (np.abs(r) >= window)[None, None]
    if key_padding_mask is not None:
        masked |= np.asarray(key_padding_mask, bool)[:, None, None, :]
    s = np.where(masked, -np.inf, s)
    empty = masked.all(axis=-1, keepdims=True)
    s = np.where(empty, 0.0, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    # out_m = sum over the keys m sees of p_mn v_n: a masked key is not in the sum
    # at all, so a NaN or inf in its value cannot reach the output (p @ v would
    # turn 0 * NaN into NaN).  Finite values through p @ v, the rest key by key.
    finite = np.isfinite(v)
    out = p @ np.where(finite, v, 0.0)
    for bi, hi, ni in zip(*np.nonzero(~finite.all(axis=-1))):
        seen = ~np.broadcast_to(masked, (b, h, m, n))[bi, hi, :, ni]
        out[bi, hi, seen] += p[bi, hi, seen, ni, None] * np.where(finite[bi, hi, ni], 0.0, v[bi, hi, ni])
    return np.where(empty, 0.0, out)


# ---- RoPE ---------------------------------------------------------------------

def rope_inv_freq(theta: float, head_dim: int) -> np.ndarray:
    """inv_freq_i = theta^(-2i/d), i < d/2."""
    return np.array([theta ** (-2.0 * i / head_dim) for i in range(head_dim // 2)])


def rope(x, positions, inv_freq, layout: str = "half", rotary_pairs: int | None = None, scale: float = 1.0,
         inverse: bool = False) -> np.ndarray:
    """Rotary embedding of x (..., L, d), float64, pair by pair from the formula.

    positions broadcast to x.shape[:-1].  Pair i is (x[i], x[i + d/2]) for
    "half" and (x[2i], x[2i+1]) for "interleaved"; with angle pos * inv_freq[i]
    (negated when inverse) it becomes (a cos - b sin, b cos + a sin) * scale.
    Pairs i >= rotary_pairs are x * scale.
    """
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    half = d // 2
    pairs = half if rotary_pairs is None else rotary_pairs
    pos = np.broadcast_to(np.asarray(positions, dtype=np.float64), x.shape[:-1])
    out = x * scale
    for i in range(pairs):
        angle = pos * float(inv_freq[i])
        c, s = np.cos(angle), np.sin(angle)
        if inverse:
            s = -s
        ia, ib = (i, i + half) if layout == "half" else (2 * i, 2 * i + 1)
        a, b = x[..., ia], x[..., ib]
        out[..., ia] = (a * c - b * s) * scale
        out[..., ib] = (b * c + a * s) * scale
    return out


def rope_pair_magnitude(x, layout: str = "half") -> np.ndarray:
    """|a| + |b| of the pair each element belongs to (the scale of its rounding error)."""
    x = np.abs(np.asarray(x, dtype=np.float64))
    half = x.shape[-1] // 2
    if layout == "half":
        partner = np.concatenate([x[..., half:], x[..., :half]], axis=-1)
    else:
        partner = x.reshape(*x.shape[:-1], half, 2)[..., ::-1].reshape(x.shape)
    return x + partner


# ---- a Llama decoder with a pluggable position encoding (Hugging Face shim) -------

def llama_logits(params: dict, ids, *, n_heads: int, n_kv_heads: int, eps: float, encoding: str,
                 keep=None, wavelet=None, theta: float = 10000.0, rotary_pairs: int | None = None) -> np.ndarray:
    """Logits (L, vocab) of one sequence through a Llama decoder, float64, straight from the formulas.

    params: float64 arrays named as in the Hugging Face state dict ("model.embed_tokens.weight",
    "model.layers.{i}.self_attn.q_proj.weight", ...; linear weights are (out, in)).
    encoding: "wavelet" (score = s·(q·k + q·ψ((r − b_j)/a_j)), wavelet=(family, scales, shifts)),
    "alibi" (score = s·q·k − slope_h·r), "nope", or "rope" (q, k rotated at positions 0…L−1 with
    theta / rotary_pairs); r = m − n, s = 1/√d.  keep (L,) bool: False marks a padding token, which
    no query attends to (its own row is computed like any other).
    Also the Llama variants: q/k RMS norms over each head (Qwen3: "q_norm.weight" of size d) or over the
    whole projection (OLMo-2: size H·d), and OLMo-2's norms after attention and MLP instead of before
    (no "input_layernorm": x + norm(attn(x)), then x + norm(mlp(x))).
    """
    ids = np.asarray(ids)
    seq = ids.shape[0]
    keep = np.ones(seq, bool) if keep is None else np.asarray(keep, bool)

    def lin(x, name):
        return x @ params[name + ".weight"].T + params.get(name + ".bias", 0.0)

    def rms(x, name):
        return params[name + ".weight"] * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)

    x = params["model.embed_tokens.weight"][ids]
    n_layers = len({k.split(".")[2] for k in params if k.startswith("model.layers.")})
    r = np.arange(seq)[:, None] - np.arange(seq)[None, :]
    visible = (r >= 0) & keep[None, :]
    for li in range(n_layers):
        p = f"model.layers.{li}."
        post_norms = p + "input_layernorm.weight" not in params  # OLMo-2
        hcur = x if post_norms else rms(x, p + "input_layernorm")
        q, k = lin(hcur, p + "self_attn.q_proj"), lin(hcur, p + "self_attn.k_proj")
        per_head = p + "self_attn.q_norm.weight" in params and params[p + "self_attn.q_norm.weight"].shape[0] \
            * n_heads == q.shape[-1]
        if p + "self_attn.q_norm.weight" in params and not per_head:
            q, k = rms(q, p + "self_attn.q_norm"), rms(k, p + "self_attn.k_norm")
        q = q.reshape(seq, n_heads, -1).transpose(1, 0, 2)
        k = k.reshape(seq, n_kv_heads, -1).transpose(1, 0, 2)
        if per_head:
            q, k = rms(q, p + "self_attn.q_norm"), rms(k, p + "self_attn.k_norm")
        v = lin(hcur, p + "self_attn.v_proj").reshape(seq, n_kv_heads, -1).transpose(1, 0, 2)
        d = q.shape[-1]
        s = 1.0 / np.sqrt(d)
        if encoding == "rope":
            q = rope(q, np.arange(seq), rope_inv_freq(theta, d), "half", rotary_pairs)
            k = rope(k, np.arange(seq), rope_inv_freq(theta, d), "half", rotary_pairs)
        out = np.zeros_like(q)
        slopes = alibi_slopes(n_heads)
        for h in range(n_heads):
            kh, vh = k[h // (n_heads // n_kv_heads)], v[h // (n_heads // n_kv_heads)]
            score = s * (q[h] @ kh.T)
            if encoding == "wavelet":
                family, scales, shifts = wavelet
                for m in range(seq):
                    table = wavelet_table(family, scales, shifts, r[m])  # (N, d): p_{m,n}
                    score[m] += s * (table @ q[h, m])
            elif encoding == "alibi":
                score = score - slopes[h] * r
            score = np.where(visible, score, -np.inf)
            for m in range(seq):
                if visible[m].any():
                    w = np.exp(score[m] - score[m].max())
                    out[h, m] = (w / w.sum()) @ vh
        attn = lin(out.transpose(1, 0, 2).reshape(seq, -1), p + "self_attn.o_proj")
        x = x + (rms(attn, p + "post_attention_layernorm") if post_norms else attn)
        hcur = x if post_norms else rms(x, p + "post_attention_layernorm")
        gate = lin(hcur, p + "mlp.gate_proj")
        mlp = lin(gate / (1.0 + np.exp(-gate)) * lin(hcur, p + "mlp.up_proj"), p + "mlp.down_proj")
        x = x + (rms(mlp, p + "post_feedforward_layernorm") if post_norms else mlp)
    return lin(rms(x, "model.norm"), "lm_head")


# ---- attention with a position bias (DEVELOPING.md "Fused attention") -----------

@_remembered
def attention_with_grads(q, k, v, grad_out, scale: float, q_offset: int, causal: bool, pos_enc: str, *,
                         table=None, r_lo: int = 0, clamp: bool = False, slopes=None, key_padding_mask=None,
                         grad_lse=None, window: int = 0, softcap: float = 0.0):
    """Forward (out, lse) and, when grad_out is given, the gradients in float64:
    dq, dk, dv, dtable (relative/wavelet) and dslopes (alibi), for the loss
    <grad_out, out> + <grad_lse, lse>.

    s = scale (q.k + q.T[r - r_lo]) ("relative"/"wavelet"), scale q.k - slope |r| ("alibi"),
    scale q.k ("none"), then softcap tanh(s / softcap) with a soft-cap (its derivative 1 - tanh^2 in
    every gradient); masked entries (causal, |r| >= window, padding) are -inf; a row without keys
    gives out = 0, lse = -inf.
    """
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, H, M, d = q.shape
    Hk, N = k.shape[1], k.shape[2]
    g = H // Hk
    kk = np.repeat(k, g, axis=1)
    vv = np.repeat(v, g, axis=1)
    s = q @ kk.swapaxes(-1, -2)  # (matmul, as in attention())
    r = (q_offset + np.arange(M))[:, None] - np.arange(N)[None, :]
    if pos_enc in ("relative", "wavelet"):
        s = s + rel_bias(q, table, r_lo, N, q_offset, False, clamp)
        s = s * scale
    elif pos_enc == "alibi":
        s = s * scale - np.asarray(slopes, np.float64)[None, :, None, None] * np.abs(r)[None, None]
    else:
        s = s * scale
    dcap = 1.0  # d capped score / d score
    if softcap:
        th = np.tanh(s / softcap)
        s, dcap = softcap * th, 1.0 - th * th
    mask = np.zeros((B, 1, M, N), dtype=bool)
    if causal:
        mask |= (r < 0)[None, None]
    if window:
        mask |= (np.abs(r) >= window)[None, None]
    if key_padding_mask is not None:
        mask |= np.asarray(key_padding_mask, bool)[:, None, None, :]
    s = np.where(mask, -np.inf, s)
    mx = s.max(axis=-1, keepdims=True) if N else np.full((B, H, M, 1), -np.inf)
    empty = ~np.isfinite(mx)
    e = np.exp(s - np.where(empty, 0.0, mx)) if N else np.zeros((B, H, M, 0))
    den = e.sum(axis=-1, keepdims=True)
    p = np.where(empty, 0.0, e / np.where(empty, 1.0, den))
    out = p @ vv
    lse = np.where(empty[..., 0], -np.inf, (np.where(empty, 0.0, mx) + np.log(np.where(empty, 1.0, den)))[..., 0])
    res = {"out": out, "lse": lse}
    if grad_out is None:
        return res
    go = np.asarray(grad_out, np.float64)
    dp = go @ vv.swapaxes(-1, -2)
    D = (go * out).sum(-1, keepdims=True)
    if grad_lse is not None:  # d lse[m] / d s[m, n] = p[m, n]
        D = D - np.asarray(grad_lse, np.float64)[..., None]
    ds = p * (dp - D) * dcap
    dq = scale * (ds @ kk)
    dk = (scale * (ds.swapaxes(-1, -2) @ q)).reshape(B, Hk, g, N, d).sum(2)
    dv = (p.swapaxes(-1, -2) @ go).reshape(B, Hk, g, N, d).sum(2)
    res.update(dq=dq, dk=dk, dv=dv)
    if pos_enc == "alibi":
        res["dslopes"] = -(ds * np.abs(r)[None, None]).sum(axis=(0, 2, 3))
        # scale of the terms (for error bounds: dS cancels, its parts do not)
        res["dslopes_mag"] = (p * (np.abs(dp) + np.abs(D)) * np.abs(r)[None, None]).sum(axis=(0, 2, 3))
    if pos_enc in ("relative", "wavelet"):
        dq_t, dT = rel_bias_grads(scale * ds, q, table, r_lo, q_offset, False, clamp)
        res["dq"] = dq + dq_t
        res["dtable"] = dT
    return res
