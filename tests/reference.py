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
