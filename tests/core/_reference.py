"""Hand-written float64 NumPy implementations of the equations the core implements.

They are deliberately naive: mixtures are built as vectors and normalized one by one, softmaxes are
written out, nothing is shared with ``hardmix``. Tests compare the library against them.
"""

from __future__ import annotations

import numpy as np


def normalize(x: np.ndarray) -> np.ndarray:
    """L2-normalize the rows (last axis)."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def logsumexp(v: np.ndarray) -> float:
    """log sum exp of a 1-D array, -inf entries allowed (at least one finite)."""
    v = np.asarray(v, dtype=np.float64)
    m = np.max(v)
    return float(m + np.log(np.sum(np.exp(v - m))))


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> float:
    """Mean of -log softmax(logits[i])[targets[i]]."""
    return float(np.mean([logsumexp(row) - row[t] for row, t in zip(logits, targets)]))


def info_nce_in_batch(z1: np.ndarray, z2: np.ndarray, tau: float, symmetric: bool) -> float:
    """SimCSE InfoNCE on cosine similarities, positives on the diagonal; optionally both directions."""
    h1, h2 = normalize(z1), normalize(z2)
    b = len(h1)
    loss = cross_entropy(h1 @ h2.T / tau, np.arange(b))
    if symmetric:
        loss = 0.5 * (loss + cross_entropy(h2 @ h1.T / tau, np.arange(b)))
    return loss


def mix(a: np.ndarray, b: np.ndarray, lam: float) -> np.ndarray:
    """normalize(lam a + (1 - lam) b) of two vectors."""
    m = lam * a + (1.0 - lam) * b
    return m / np.linalg.norm(m)


def mixcse_direction_terms(anchors: np.ndarray, positives: np.ndarray, lam: float, tau: float):
    """Per anchor i: the logits [h_i.h'_j for all j] + [h_i.m'_ij for j != i] and the mixtures m'_ij.

    Returns (terms, mixtures): terms[i] is a list of logits whose entry i is the positive; mixtures[i][j]
    is m'_ij (None for j = i).
    """
    b = len(anchors)
    terms, mixtures = [], []
    for i in range(b):
        row = [float(anchors[i] @ positives[j]) / tau for j in range(b)]
        mrow = []
        for j in range(b):
            if j == i:
                mrow.append(None)
                continue
            m = mix(positives[i], positives[j], lam)
            mrow.append(m)
            row.append(float(anchors[i] @ m) / tau)
        terms.append(row)
        mixtures.append(mrow)
    return terms, mixtures


def mixcse_loss_np(z1: np.ndarray, z2: np.ndarray, lam: float, tau: float, bidirectional: bool) -> float:
    """The MixCSE loss with in-batch negatives, from the equations (values only; SG does not matter)."""
    h1, h2 = normalize(z1), normalize(z2)
    terms, _ = mixcse_direction_terms(h1, h2, lam, tau)
    loss1 = np.mean([logsumexp(t) - t[i] for i, t in enumerate(terms)])
    if not bidirectional:
        return float(loss1)
    terms2, _ = mixcse_direction_terms(h2, h1, lam, tau)
    loss2 = np.mean([logsumexp(t) - t[i] for i, t in enumerate(terms2)])
    return float(0.5 * (loss1 + loss2))


def _direction_grads(anchors, positives, lam, tau):
    """Gradients of sum_i L_i (one direction, mixtures constant) w.r.t. the unit anchors and positives."""
    b, d = anchors.shape
    terms, mixtures = mixcse_direction_terms(anchors, positives, lam, tau)
    g_anchor = np.zeros((b, d))
    g_positive = np.zeros((b, d))
    for i in range(b):
        t = np.asarray(terms[i])
        p = np.exp(t - logsumexp(t))  # softmax over [plain columns j=0..B-1 | mixtures j != i]
        # dL_i/dh_i = (1/tau) (sum_j p_ij h'_j + sum_{j!=i} q_ij m'_ij - h'_i)
        g = positives.T @ p[:b] - positives[i]
        k = b
        for j in range(b):
            if j == i:
                continue
            g = g + p[k] * mixtures[i][j]
            k += 1
        g_anchor[i] += g / tau
        # dL_i/dh'_j through the plain logits only (the mixtures are constants): (p_ij - [i = j]) h_i / tau
        for j in range(b):
            g_positive[j] += (p[j] - (1.0 if i == j else 0.0)) * anchors[i] / tau
    return g_anchor, g_positive


def mixcse_stopgrad_grads_np(z1, z2, lam, tau, bidirectional):
    """Analytic gradients of the stop-gradient MixCSE loss w.r.t. the raw (un-normalized) z1 and z2.

    The unit-vector gradients are softmax-weighted combinations (see ``_direction_grads``); the
    normalization h = z / ||z|| contributes the Jacobian (I - h h^T) / ||z||.
    """
    z1, z2 = np.asarray(z1, np.float64), np.asarray(z2, np.float64)
    h1, h2 = normalize(z1), normalize(z2)
    b = len(h1)
    ga1, gp1 = _direction_grads(h1, h2, lam, tau)  # direction 1: anchors h1, positives h2
    g_h1, g_h2 = ga1 / b, gp1 / b
    if bidirectional:
        ga2, gp2 = _direction_grads(h2, h1, lam, tau)  # direction 2: anchors h2, positives h1
        g_h1 = 0.5 * (g_h1 + gp2 / b)
        g_h2 = 0.5 * (g_h2 + ga2 / b)

    def through_norm(z, h, g):
        return (g - np.sum(g * h, axis=1, keepdims=True) * h) / np.linalg.norm(z, axis=1, keepdims=True)

    return through_norm(z1, h1, g_h1), through_norm(z2, h2, g_h2)


def mixcse_queue_np(q, k, queue, lam, tau, valid=None) -> float:
    """MixCSE against a queue: anchor q_i, positive k_i, negatives n_j (valid ones), mixtures
    normalize(lam k_i + (1 - lam) n_j) of the positive with each valid negative."""
    q, k, n = normalize(q), normalize(k), normalize(queue)
    losses = []
    for i in range(len(q)):
        pos = float(q[i] @ k[i]) / tau
        row = [pos]
        for j in range(len(n)):
            if valid is not None and not valid[i, j]:
                continue
            row.append(float(q[i] @ n[j]) / tau)
            row.append(float(q[i] @ mix(k[i], n[j], lam)) / tau)
        losses.append(logsumexp(row) - pos)
    return float(np.mean(losses))


def cosine(x: np.ndarray, y: np.ndarray) -> float:
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def mixcse_reference_np(z1: np.ndarray, z2: np.ndarray, lam: float, tau: float) -> float:
    """The official MixCSE code's loss, from the note (shared/notes/mixcse-official-logits.md).

    Un-normalized z1, z2; z3_j = lam z2_j + (1 - lam) z2_{j+1}; z4_i = lam z1_i + (1 - lam) z1_{i+1}
    (indices mod B); S1 = sim(z1_i, z2_j), S2 = sim(z1_i, z3_j) with S2[i, i-1] := 0,
    S3 = sim(z4_i, z2_j) with S3[i, i+1] := 0; cross-entropy of [S1 | S2 | S3] with targets arange(B).
    """
    z1, z2 = np.asarray(z1, np.float64), np.asarray(z2, np.float64)
    b = len(z1)
    z3 = [lam * z2[j] + (1 - lam) * z2[(j + 1) % b] for j in range(b)]
    z4 = [lam * z1[i] + (1 - lam) * z1[(i + 1) % b] for i in range(b)]
    rows = []
    for i in range(b):
        s1 = [cosine(z1[i], z2[j]) / tau for j in range(b)]
        s2 = [cosine(z1[i], z3[j]) / tau for j in range(b)]
        s3 = [cosine(z4[i], z2[j]) / tau for j in range(b)]
        s2[(i - 1) % b] = 0.0  # multiplied by 0, not masked: exp(0) stays in the denominator
        s3[(i + 1) % b] = 0.0
        rows.append(s1 + s2 + s3)
    return cross_entropy(np.asarray(rows), np.arange(b))


# ---- mixcse_adaptive (issue 17): MixCSE with a per-anchor lambda from the Sec. 4.3 bound ----------------


def adaptive_lam_np(h, p, n, valid, margin, lam_max, lam_min=0.0, iterations=200):
    """The per-anchor lambda of ``mixcse_adaptive``, pair by pair, on mixtures built as vectors.

    h (B, D) anchors, p (B, D) positives, n (N, D) negatives, all unit; valid (B, N) bool. For anchor i,
    t_i = h_i.p_i - margin; a valid j with h_i.n_j <= t_i is constrained; its lam*_ij is lam_max if
    h_i.mix(p_i, n_j, lam_max) <= t_i, else found by bisection on [0, lam_max] (the feasible end kept);
    lam_i = max(lam_min, min_j lam*_ij), lam_max if nothing constrains.

    Returns (lam (B,), raw (B,) before the floor, constrained (B, N) bool, t (B,)).
    """
    b, k = len(h), len(n)
    lam = np.full(b, float(lam_max))
    constrained = np.zeros((b, k), dtype=bool)
    t = np.array([float(h[i] @ p[i]) - margin for i in range(b)])
    for i in range(b):
        for j in range(k):
            if not valid[i, j] or float(h[i] @ n[j]) > t[i]:
                continue
            constrained[i, j] = True
            if float(h[i] @ mix(p[i], n[j], lam_max)) <= t[i]:
                star = float(lam_max)
            else:
                lo, hi = 0.0, float(lam_max)
                for _ in range(iterations):
                    mid = 0.5 * (lo + hi)
                    if float(h[i] @ mix(p[i], n[j], mid)) <= t[i]:
                        lo = mid
                    else:
                        hi = mid
                star = lo
            lam[i] = min(lam[i], star)
    return np.maximum(lam, lam_min), lam, constrained, t


def mixcse_adaptive_rows_np(h, p, n, valid, lam, tau, positive_column, mixtures=None):
    """Per anchor i the logits of one direction: the plain columns h_i.n_j / tau (all of them in-batch,
    where column ``positive_column[i]`` is the positive; the valid ones against a queue, after the positive
    h_i.p_i / tau in front), then h_i.m_ij / tau for every valid j, m_ij = mix(p_i, n_j, lam_i).

    ``mixtures`` (from an earlier call) holds the m_ij fixed (stop-gradient in a finite difference).
    Returns (rows, positive index of each row, mixtures).
    """
    rows, targets, used = [], [], {}
    for i in range(len(h)):
        if positive_column is None:  # queue: [positive | valid negatives]
            row = [float(h[i] @ p[i]) / tau]
            row += [float(h[i] @ n[j]) / tau for j in range(len(n)) if valid[i, j]]
            targets.append(0)
        else:
            row = [float(h[i] @ n[j]) / tau for j in range(len(n))]
            targets.append(positive_column[i])
        for j in range(len(n)):
            if not valid[i, j]:
                continue
            m = mix(p[i], n[j], lam[i]) if mixtures is None else mixtures[i, j]
            used[i, j] = m
            row.append(float(h[i] @ m) / tau)
        rows.append(row)
    return rows, targets, used


def mixcse_adaptive_loss_np(z1, z2, margin, lam_max, lam_min, tau, bidirectional, frozen=None):
    """The in-batch mixcse_adaptive loss: each direction computes its own lam_i (the views swapped in the
    second). ``frozen`` (the second value returned) fixes the lambdas and mixtures of both directions.
    Returns (loss, frozen)."""
    h1, h2 = normalize(z1), normalize(z2)
    b = len(h1)
    valid = ~np.eye(b, dtype=bool)
    losses, state = [], []
    for d, (anchors, positives) in enumerate([(h1, h2), (h2, h1)][: 2 if bidirectional else 1]):
        if frozen is None:
            lam = adaptive_lam_np(anchors, positives, positives, valid, margin, lam_max, lam_min)[0]
            mixtures = None
        else:
            lam, mixtures = frozen[d]
        rows, targets, used = mixcse_adaptive_rows_np(
            anchors, positives, positives, valid, lam, tau, list(range(b)), mixtures
        )
        losses.append(cross_entropy_rows(rows, targets))
        state.append((lam, used))
    return float(np.mean(losses)), state


def mixcse_adaptive_queue_np(q, k, queue, valid, margin, lam_max, lam_min, tau, frozen=None):
    """mixcse_adaptive against a queue: anchor q_i, positive k_i, valid queue entries n_j. Returns (loss,
    frozen)."""
    h, key, n = normalize(q), normalize(k), normalize(queue)
    if frozen is None:
        lam = adaptive_lam_np(h, key, n, valid, margin, lam_max, lam_min)[0]
        mixtures = None
    else:
        lam, mixtures = frozen
    rows, targets, used = mixcse_adaptive_rows_np(h, key, n, valid, lam, tau, None, mixtures)
    return cross_entropy_rows(rows, targets), (lam, used)


def cross_entropy_rows(rows, targets) -> float:
    """Mean of logsumexp(row) - row[target] over rows of possibly different lengths."""
    return float(np.mean([logsumexp(np.asarray(r)) - r[t] for r, t in zip(rows, targets)]))


def central_difference(f, x, eps=1e-6):
    """The gradient of the scalar function f at the array x, by central differences."""
    x = np.asarray(x, dtype=np.float64)
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += eps
        down[idx] -= eps
        grad[idx] = (f(up) - f(down)) / (2 * eps)
    return grad
