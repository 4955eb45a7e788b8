"""Float64 NumPy oracles, written straight from the formulas (DESIGN.md §1).

Deliberately naive: explicit loops or direct broadcasting, no cleverness, no
wavepe code.  Every kernel variant is compared against these.
"""

from __future__ import annotations

import numpy as np


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


def rel_bias(q, table, r_lo: int, k_len: int, q_offset: int, causal: bool, clamp: bool) -> np.ndarray:
    """bias[..., m, n] = q[..., m, :] . T[t(q_offset + m - n)], float64, one (m, n) at a time."""
    q = np.asarray(q, np.float64)
    table = np.asarray(table, np.float64)
    m_len = q.shape[-2]
    out = np.zeros(q.shape[:-1] + (k_len,))
    for m in range(m_len):
        for n in range(k_len):
            t = _rel_row(q_offset + m - n, r_lo, table.shape[0], causal, clamp)
            if t is not None:
                out[..., m, n] = q[..., m, :] @ table[t]
    return out


def rel_bias_grads(grad, q, table, r_lo: int, q_offset: int, causal: bool, clamp: bool):
    """(dq, dT) of sum(grad * rel_bias(q, T)): dq[m] = sum_n grad[m,n] T[t], dT[t] = sum grad[m,n] q[m]."""
    grad = np.asarray(grad, np.float64)
    q = np.asarray(q, np.float64)
    table = np.asarray(table, np.float64)
    m_len, k_len = grad.shape[-2], grad.shape[-1]
    dq = np.zeros(q.shape)
    dt = np.zeros(table.shape)
    for m in range(m_len):
        for n in range(k_len):
            t = _rel_row(q_offset + m - n, r_lo, table.shape[0], causal, clamp)
            if t is None:
                continue
            g = grad[..., m, n]
            dq[..., m, :] += g[..., None] * table[t]
            dt[t] += np.sum(g[..., None] * q[..., m, :], axis=tuple(range(q.ndim - 2)))
    return dq, dt


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


# ---- attention with a position bias (DEVELOPING.md "Fused attention") -----------

def attention_with_grads(q, k, v, grad_out, scale: float, q_offset: int, causal: bool, pos_enc: str, *,
                         table=None, r_lo: int = 0, clamp: bool = False, slopes=None, key_padding_mask=None,
                         grad_lse=None):
    """Forward (out, lse) and, when grad_out is given, the gradients in float64:
    dq, dk, dv, dtable (relative/wavelet) and dslopes (alibi), for the loss
    <grad_out, out> + <grad_lse, lse>.

    s = scale (q.k + q.T[r - r_lo]) ("relative"/"wavelet"), scale q.k - slope |r| ("alibi"),
    scale q.k ("none"); masked entries are -inf; a row without keys gives out = 0, lse = -inf.
    """
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, H, M, d = q.shape
    Hk, N = k.shape[1], k.shape[2]
    g = H // Hk
    kk = np.repeat(k, g, axis=1)
    vv = np.repeat(v, g, axis=1)
    s = np.einsum("bhmd,bhnd->bhmn", q, kk)
    r = (q_offset + np.arange(M))[:, None] - np.arange(N)[None, :]
    if pos_enc in ("relative", "wavelet"):
        s = s + rel_bias(q, table, r_lo, N, q_offset, False, clamp)
        s = s * scale
    elif pos_enc == "alibi":
        s = s * scale - np.asarray(slopes, np.float64)[None, :, None, None] * np.abs(r)[None, None]
    else:
        s = s * scale
    mask = np.zeros((B, 1, M, N), dtype=bool)
    if causal:
        mask |= (r < 0)[None, None]
    if key_padding_mask is not None:
        mask |= np.asarray(key_padding_mask, bool)[:, None, None, :]
    s = np.where(mask, -np.inf, s)
    mx = s.max(axis=-1, keepdims=True) if N else np.full((B, H, M, 1), -np.inf)
    empty = ~np.isfinite(mx)
    e = np.exp(s - np.where(empty, 0.0, mx)) if N else np.zeros((B, H, M, 0))
    den = e.sum(axis=-1, keepdims=True)
    p = np.where(empty, 0.0, e / np.where(empty, 1.0, den))
    out = np.einsum("bhmn,bhnd->bhmd", p, vv)
    lse = np.where(empty[..., 0], -np.inf, (np.where(empty, 0.0, mx) + np.log(np.where(empty, 1.0, den)))[..., 0])
    res = {"out": out, "lse": lse}
    if grad_out is None:
        return res
    go = np.asarray(grad_out, np.float64)
    dp = np.einsum("bhmd,bhnd->bhmn", go, vv)
    D = (go * out).sum(-1, keepdims=True)
    if grad_lse is not None:  # d lse[m] / d s[m, n] = p[m, n]
        D = D - np.asarray(grad_lse, np.float64)[..., None]
    ds = p * (dp - D)
    dq = scale * np.einsum("bhmn,bhnd->bhmd", ds, kk)
    dk = (scale * np.einsum("bhmn,bhmd->bhnd", ds, q)).reshape(B, Hk, g, N, d).sum(2)
    dv = np.einsum("bhmn,bhmd->bhnd", p, go).reshape(B, Hk, g, N, d).sum(2)
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
