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


def info_nce_in_batch(z1: np.ndarray, z2: np.ndarray, tau: float, both_directions: bool) -> float:
    """SimCSE InfoNCE on cosine similarities, positives on the diagonal; optionally both directions."""
    h1, h2 = normalize(z1), normalize(z2)
    b = len(h1)
    loss = cross_entropy(h1 @ h2.T / tau, np.arange(b))
    if both_directions:
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


def mixcse_loss_np(z1: np.ndarray, z2: np.ndarray, lam: float, tau: float, second_direction: bool) -> float:
    """The MixCSE loss with in-batch negatives, from the equations (values only; SG does not matter)."""
    h1, h2 = normalize(z1), normalize(z2)
    terms, _ = mixcse_direction_terms(h1, h2, lam, tau)
    loss1 = np.mean([logsumexp(t) - t[i] for i, t in enumerate(terms)])
    if not second_direction:
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


def mixcse_stopgrad_grads_np(z1, z2, lam, tau, second_direction):
    """Analytic gradients of the stop-gradient MixCSE loss w.r.t. the raw (un-normalized) z1 and z2.

    The unit-vector gradients are softmax-weighted combinations (see ``_direction_grads``); the
    normalization h = z / ||z|| contributes the Jacobian (I - h h^T) / ||z||.
    """
    z1, z2 = np.asarray(z1, np.float64), np.asarray(z2, np.float64)
    h1, h2 = normalize(z1), normalize(z2)
    b = len(h1)
    ga1, gp1 = _direction_grads(h1, h2, lam, tau)  # direction 1: anchors h1, positives h2
    g_h1, g_h2 = ga1 / b, gp1 / b
    if second_direction:
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


# ---- HCL (Robinson et al., ICLR 2021) and DCL (Chuang et al., NeurIPS 2020) ---------------------------


def hcl_anchor_np(pos: float, negs, tau: float, beta: float, tau_plus: float) -> tuple[float, bool]:
    """One anchor's HCL loss, literally in exp space (the papers' code, M = 1), and whether the floor is
    active. ``negs`` are the logits l_j of its N valid negatives; beta = 0 is DCL.

        imp_j = exp(beta l_j);  reweight = sum_j imp_j exp(l_j) / mean_j imp_j
        Ng = max((-tau_plus N e^p + reweight) / (1 - tau_plus), N e^{-1/tau});  L = -log(e^p / (e^p + Ng))
    """
    import math

    n = len(negs)
    if n == 0:
        return 0.0, False
    e_pos = math.exp(pos)
    imp = [math.exp(beta * float(l)) for l in negs]
    mean_imp = sum(imp) / n
    reweight = sum(w * math.exp(float(l)) for w, l in zip(imp, negs)) / mean_imp
    ng = (-tau_plus * n * e_pos + reweight) / (1.0 - tau_plus)
    floor = n * math.exp(-1.0 / tau)
    clamped = ng < floor
    ng = max(ng, floor)
    return -math.log(e_pos / (e_pos + ng)), clamped


def hcl_rows_np(pos, logits, tau: float, beta: float, tau_plus: float) -> float:
    """Mean HCL loss over rows: ``pos`` (B,), ``logits`` (B, C) whose -inf entries are not negatives."""
    losses = []
    for i in range(len(pos)):
        negs = [float(v) for v in logits[i] if v != -np.inf]
        losses.append(hcl_anchor_np(float(pos[i]), negs, tau, beta, tau_plus)[0])
    return float(np.mean(losses))


def hcl_in_batch_np(z1, z2, tau: float, beta: float, tau_plus: float, both_directions: bool) -> float:
    """HCL in hardmix's SimCSE layout: anchor h_i, positive h'_i, the B - 1 negatives h'_j (j != i);
    with ``both_directions`` the mean with the second direction (anchors h'_i against h_j)."""

    def direction(a, c):
        b = len(a)
        pos = [float(a[i] @ c[i]) / tau for i in range(b)]
        rows = [[float(a[i] @ c[j]) / tau if j != i else -np.inf for j in range(b)] for i in range(b)]
        return hcl_rows_np(pos, np.asarray(rows), tau, beta, tau_plus)

    h1, h2 = normalize(z1), normalize(z2)
    loss = direction(h1, h2)
    if both_directions:
        loss = 0.5 * (loss + direction(h2, h1))
    return loss


def hcl_queue_np(q, k, queue, tau: float, beta: float, tau_plus: float, valid=None,
                 extra_points=None) -> float:
    """HCL against a queue: anchor q_i, positive k_i, the valid queue entries n_j (``valid`` (B, K) bool);
    ``extra_points`` (B, M, D) unit synthetic negatives (MoCHi's) whose logits q_i . h / tau join them."""
    qn, kn, nn_ = normalize(q), normalize(k), normalize(queue)
    pos, rows = [], []
    for i in range(len(qn)):
        pos.append(float(qn[i] @ kn[i]) / tau)
        row = [float(qn[i] @ nn_[j]) / tau for j in range(len(nn_)) if valid is None or valid[i, j]]
        if extra_points is not None:
            row += [float(qn[i] @ h) / tau for h in extra_points[i]]
        rows.append(row)
    width = max(len(r) for r in rows)
    padded = np.full((len(rows), width), -np.inf)
    for i, r in enumerate(rows):
        padded[i, : len(r)] = r
    return hcl_rows_np(pos, padded, tau, beta, tau_plus)
# ---- SynCo: hardest negatives, synthetic points and InfoNCE with fixed extra points ------


def hardest_np(similarities: np.ndarray, valid: np.ndarray, n: int) -> list[int]:
    """One row: the indices of the n largest valid similarities (a full sort), listed in ascending index."""
    allowed = [j for j in range(len(similarities)) if valid[j]]
    top = sorted(allowed, key=lambda j: -float(similarities[j]))[:n]
    return sorted(top)


def synco_points_np(q, negatives, hard, extrapolated, extrapolation, noised, noise, perturbed, adversarial,
                    sigma, delta, eta) -> list[np.ndarray]:
    """SynCo's four extra kinds for one query q (D,), vector by vector, in the order extrapolated, noise,
    perturbed, adversarial. ``hard`` lists the query's hardest negatives; the other arguments are that
    query's draws (positions into ``hard``, b, the unscaled Gaussian e).

    extrapolated: normalize(n + b (n - q)); noise: normalize(n + sigma e); perturbed: normalize(n + delta q)
    (the gradient of q . n in n is q); adversarial: normalize(n + eta sign(q)).
    """
    q = np.asarray(q, np.float64)
    points = []
    for m, pos in enumerate(extrapolated):
        n = negatives[hard[int(pos)]]
        b = float(extrapolation[m])
        points.append(normalize(n + b * (n - q)))
    for m, pos in enumerate(noised):
        n = negatives[hard[int(pos)]]
        points.append(normalize(n + sigma * np.asarray(noise[m], np.float64)))
    for pos in perturbed:
        n = negatives[hard[int(pos)]]
        points.append(normalize(n + delta * q))
    for pos in adversarial:
        n = negatives[hard[int(pos)]]
        sign = np.array([1.0 if x > 0 else (-1.0 if x < 0 else 0.0) for x in q])
        points.append(normalize(n + eta * sign))
    return points


def mochi_points_np(q, negatives, hard, first, second, alpha, pick, beta) -> list[np.ndarray]:
    """MoCHi's points for one query: normalize(alpha n_a + (1 - alpha) n_b), then
    normalize(beta q + (1 - beta) n_c), from that query's draws (positions into ``hard``)."""
    points = []
    for a, b, w in zip(first, second, alpha):
        points.append(mix(negatives[hard[int(a)]], negatives[hard[int(b)]], float(w)))
    for c, w in zip(pick, beta):
        points.append(mix(np.asarray(q, np.float64), negatives[hard[int(c)]], float(w)))
    return points


def info_nce_with_points_np(anchors, candidates, valid, points, tau, positives=None, positive_index=None):
    """InfoNCE of unit anchors against unit candidates (the valid ones) plus fixed extra points per anchor.

    Row i: logits [a_i . p_i | a_i . c_j (valid j) | a_i . s_im] / tau, loss logsumexp(row) - a_i . p_i / tau,
    with p_i = positives[i] (queue) or candidates[positive_index[i]] (in-batch). The points are constants
    (stop-gradient). Returns (mean loss, gradient of it w.r.t. the unit anchors (B, D), w.r.t. the unit
    candidates (N, D), the positive's column included).
    """
    anchors, candidates = np.asarray(anchors, np.float64), np.asarray(candidates, np.float64)
    b, d = anchors.shape
    g_a, g_c = np.zeros((b, d)), np.zeros_like(candidates)
    losses = []
    for i in range(b):
        a = anchors[i]
        if positive_index is not None:
            p = candidates[positive_index[i]]
        else:
            p = np.asarray(positives[i], np.float64)
        cols = [j for j in range(len(candidates)) if valid[i, j]]
        vectors = [p] + [candidates[j] for j in cols] + list(points[i])
        row = np.array([float(a @ v) / tau for v in vectors])
        lse = logsumexp(row)
        losses.append(lse - row[0])
        w = np.exp(row - lse)  # softmax over the row
        g = -p / tau
        for weight, v in zip(w, vectors):
            g = g + weight * v / tau
        g_a[i] += g / b
        if positive_index is not None:
            g_c[positive_index[i]] += (w[0] - 1.0) * a / tau / b
        for weight, j in zip(w[1 : 1 + len(cols)], cols):
            g_c[j] += weight * a / tau / b
    return float(np.mean(losses)), g_a, g_c


def through_normalization(z: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The gradient w.r.t. raw rows z of a function of h = z / ||z||, from its gradient g w.r.t. h."""
    z = np.asarray(z, np.float64)
    h = normalize(z)
    return (g - np.sum(g * h, axis=1, keepdims=True) * h) / np.linalg.norm(z, axis=1, keepdims=True)
# ---- false-negative filtering, hard copies and the composition of strategies ----------------


def false_negatives_np(cos: np.ndarray, valid: np.ndarray, top_k: int, threshold: float | None) -> np.ndarray:
    """The suspected false negatives of each row, (B, N) bool, by a full sort of the row's valid negatives.

    top_k > 0: the min(top_k, n_valid - 1) most similar; else the ones with cosine > threshold, less the
    least similar one if that would drop all of them. A row always keeps one negative (if it has any).
    """
    b, n = cos.shape
    dropped = np.zeros((b, n), dtype=bool)
    for i in range(b):
        idx = [j for j in range(n) if valid[i, j]]
        ranked = sorted(idx, key=lambda j: -cos[i, j])  # most similar first
        if top_k > 0:
            chosen = ranked[: max(min(top_k, len(idx) - 1), 0)]
        else:
            chosen = [j for j in ranked if cos[i, j] > threshold]
            if idx and len(chosen) == len(idx):
                chosen = chosen[:-1]  # keep the least similar
        for j in chosen:
            dropped[i, j] = True
    return dropped


def composed_direction_np(
    anchors: np.ndarray,
    positives: np.ndarray,
    candidates: np.ndarray,
    tau: float,
    valid: np.ndarray,
    dropped: np.ndarray | None = None,
    log_weights: np.ndarray | None = None,
    mixcse_lam: float | None = None,
    extra: list | None = None,
) -> float:
    """One direction's mean InfoNCE, term by term, from unit vectors (float64).

    Row i: the positive a_i.p_i / tau; for each candidate j that is a valid negative and not dropped, the
    term a_i.c_j / tau + log_weights[i, j] and (with ``mixcse_lam``) the mixture term
    a_i.normalize(lam p_i + (1 - lam) c_j) / tau; then the logits ``extra[i]`` (a list per row).
    """
    losses = []
    for i in range(len(anchors)):
        pos = float(anchors[i] @ positives[i]) / tau
        row = [pos]
        for j in range(len(candidates)):
            if not valid[i, j] or (dropped is not None and dropped[i, j]):
                continue
            term = float(anchors[i] @ candidates[j]) / tau
            if log_weights is not None:
                term += float(log_weights[i, j])
            row.append(term)
            if mixcse_lam is not None:
                row.append(float(anchors[i] @ mix(positives[i], candidates[j], mixcse_lam)) / tau)
        if extra is not None:
            row.extend(float(x) for x in extra[i])
        losses.append(logsumexp(np.asarray(row)) - pos)
    return float(np.mean(losses))


def in_batch_valid_np(b: int) -> np.ndarray:
    """(B, B) bool: every column but the anchor's own positive."""
    return ~np.eye(b, dtype=bool)


def queue_valid_np(query_ids, queue_ids, b: int, k: int) -> np.ndarray:
    """(B, K) bool valid queue negatives: no empty slot (id -1), none with the query's own id."""
    valid = np.ones((b, k), dtype=bool)
    if queue_ids is None:
        return valid
    for i in range(b):
        for j in range(k):
            if queue_ids[j] == -1 or (query_ids is not None and queue_ids[j] == query_ids[i]):
                valid[i, j] = False
    return valid


def filtered_in_batch_np(
    z1, z2, tau: float, both_directions: bool, top_k: int, threshold: float | None
) -> float:
    """In-batch InfoNCE with each anchor's false negatives (chosen by cosine to the anchor) removed."""
    h1, h2 = normalize(z1), normalize(z2)
    valid = in_batch_valid_np(len(h1))
    loss = composed_direction_np(h1, h2, h2, tau, valid,
                                 false_negatives_np(h1 @ h2.T, valid, top_k, threshold))
    if both_directions:
        loss2 = composed_direction_np(h2, h1, h1, tau, valid,
                                      false_negatives_np(h2 @ h1.T, valid, top_k, threshold))
        loss = 0.5 * (loss + loss2)
    return loss


def filtered_queue_np(q, k, queue, tau: float, valid: np.ndarray, top_k: int,
                      threshold: float | None) -> float:
    """Queue InfoNCE [q.k | q.n] with the excluded entries (``~valid``) and the false negatives removed."""
    h, key, n = normalize(q), normalize(k), normalize(queue)
    return composed_direction_np(h, key, n, tau, valid, false_negatives_np(h @ n.T, valid, top_k, threshold))


def hardest_row_np(cos_row: np.ndarray, valid_row: np.ndarray, n_hard: int) -> np.ndarray:
    """The n_hard most similar valid negatives of one row, ascending index (a full sort)."""
    idx = [j for j in range(len(cos_row)) if valid_row[j]]
    return np.sort(np.asarray(sorted(idx, key=lambda j: -cos_row[j])[:n_hard], dtype=np.int64))


def mochi_anchor_points_np(anchor: np.ndarray, negatives: np.ndarray, hard: np.ndarray, first, second, alpha,
                           pick, beta) -> list:
    """MoCHi's points of one anchor (Eq. 3 and 4), built vector by vector from its draws."""
    points = []
    for a, c, w in zip(first, second, alpha):
        points.append(mix(negatives[hard[a]], negatives[hard[c]], float(w)))
    for c, w in zip(pick, beta):
        points.append(mix(anchor, negatives[hard[c]], float(w)))
    return points


def hard_copy_points_np(negatives: np.ndarray, hard: np.ndarray, first, pick) -> list:
    """The hard_copies control's points of one anchor: n_a of every pair, then n_c of every query mixture."""
    return [negatives[hard[a]] for a in first] + [negatives[hard[c]] for c in pick]


def finite_difference_np(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar f at x (float64), entry by entry."""
    x = np.array(x, dtype=np.float64)
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += eps
        down[index] -= eps
        grad[index] = (f(up) - f(down)) / (2 * eps)
    return grad


# ---- mixcse_adaptive: MixCSE with a per-anchor lambda from the Sec. 4.3 bound ----------------


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


def mixcse_adaptive_loss_np(z1, z2, margin, lam_max, lam_min, tau, second_direction, frozen=None):
    """The in-batch mixcse_adaptive loss: each direction computes its own lam_i (the views swapped in the
    second). ``frozen`` (the second value returned) fixes the lambdas and mixtures of both directions.
    Returns (loss, frozen)."""
    h1, h2 = normalize(z1), normalize(z2)
    b = len(h1)
    valid = ~np.eye(b, dtype=bool)
    losses, state = [], []
    for d, (anchors, positives) in enumerate([(h1, h2), (h2, h1)][: 2 if second_direction else 1]):
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


