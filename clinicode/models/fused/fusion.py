"""How the fused model's parts become one score per code: temperatures, band weights, a Platt scale per band and
optional per-code thresholds, every number learnt on dev (numpy only; docs/accuracy-tuning.md, round 14).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

# Upper edges of the frequency bands, in training notes: band 0 holds codes with 1-2 notes, 1: 3-10, 2: 11-50, 3: more.
BAND_EDGES = (2, 10, 50)
WEIGHT_GRID = tuple(round(float(x), 2) for x in np.linspace(0.0, 1.0, 11))
TITLE_GRID = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)   # the title match's weight per band (its cosine is in [0, 1])
TEMPERATURES = np.geomspace(0.05, 20.0, 49)   # the grid each part's temperature is fitted on
PASSES = 2                # coordinate-ascent passes over the bands
RARE_BELOW = 10           # per-code thresholds only for codes with fewer training notes than this
FBR = 0.3                 # a rare code keeps the global threshold unless its own reaches this dev F1 (SCutfbr's fbr)
MIN_DEV_POSITIVES = 2     # and unless dev holds at least this many of its notes
_CLIP = 30.0


def logit(p: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1 - eps)
    return np.log(p) - np.log1p(-p)


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * np.clip(z, -_CLIP, _CLIP)))


def bands(train_counts: Sequence[int] | np.ndarray, edges: Sequence[int] = BAND_EDGES) -> np.ndarray:
    """[K] each code's band index from its training-note count (0: the rarest)."""
    return np.searchsorted(np.asarray(edges), np.asarray(train_counts), side="left").astype(np.int64)


@dataclass
class Fusion:
    """The learnt numbers of one fused model: temperatures, the band weights, per-code offsets (`fused_logits`).

    Code k of band b (its training notes: 1-2, 3-10, 11-50, more) scores s_b (w_b leam_k / t_leam + (1 - w_b) lr_k /
    t_lr + d_b title_k) + bias_b + offset_k: each part over its own temperature, LEAM's share w_b, the title match's
    weight d_b, Platt's scale and bias per band, and an optional per-code threshold folded in as offset_k.
    """

    t_leam: float = 1.0
    t_lr: float = 1.0
    weights: list[float] = field(default_factory=lambda: [0.5] * (len(BAND_EDGES) + 1))  # LEAM's share per band
    edges: list[int] = field(default_factory=lambda: list(BAND_EDGES))
    offsets: np.ndarray | None = None    # [K] float; None: no per-code thresholds
    rule: str = ""
    # per band, a scale and a bias of the mixed logit (Platt scaling on dev): they move no code's ranking of notes
    # (its AUC), only how the bands compare under one threshold and within a note (micro-F1, P@8)
    scales: list[float] = field(default_factory=lambda: [1.0] * (len(BAND_EDGES) + 1))
    biases: list[float] = field(default_factory=lambda: [0.0] * (len(BAND_EDGES) + 1))
    # per band, the weight of the title match (tf-idf cosine of the note and the code's title), before the scale
    title_weights: list[float] = field(default_factory=lambda: [0.0] * (len(BAND_EDGES) + 1))

    def coefficients(self, train_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """([K] LEAM's coefficient, [K] tfidf-lr's) for codes of these training counts."""
        b = bands(train_counts, self.edges)
        w = np.asarray(self.weights, dtype=np.float64)[b]
        scale = np.asarray(self.scales, dtype=np.float64)[b]
        return scale * w / self.t_leam, scale * (1.0 - w) / self.t_lr

    def title_coefficients(self, train_counts: np.ndarray) -> np.ndarray:
        """[K] the title match's coefficient (band weight x band scale)."""
        b = bands(train_counts, self.edges)
        return np.asarray(self.scales, dtype=np.float64)[b] * np.asarray(self.title_weights, dtype=np.float64)[b]

    def bias(self, train_counts: np.ndarray) -> np.ndarray:
        """[K] each code's band bias."""
        return np.asarray(self.biases, dtype=np.float64)[bands(train_counts, self.edges)]

    def to_json(self) -> dict[str, Any]:
        return {"t_leam": self.t_leam, "t_lr": self.t_lr, "weights": list(self.weights), "edges": list(self.edges),
                "scales": list(self.scales), "biases": list(self.biases), "title_weights": list(self.title_weights),
                "rule": self.rule}


def fused_logits(z_leam: np.ndarray, z_lr: np.ndarray, fusion: Fusion, train_counts: np.ndarray, *,
                 parts: str = "both", z_title: np.ndarray | None = None) -> np.ndarray:
    """[N, K] fused logits; PARTS "leam" or "lr" switches the other parts off (their terms are 0), "no-title" the
    title match, for ablations. Z_TITLE: [N, K] each note's title match (None: no title part)."""
    a, c = fusion.coefficients(train_counts)
    z = np.zeros(np.broadcast_shapes(z_leam.shape, z_lr.shape), dtype=np.float64)
    if parts in ("both", "leam", "no-title"):
        z += a * z_leam
    if parts in ("both", "lr", "no-title"):
        z += c * z_lr
    if z_title is not None and parts == "both":
        z += fusion.title_coefficients(train_counts) * z_title
    z += fusion.bias(train_counts)
    if fusion.offsets is not None:
        z += fusion.offsets
    return z


def fit_temperature(y: np.ndarray, z: np.ndarray) -> float:
    """The T of the grid with the lowest mean binary cross-entropy of sigmoid(z / T) against y (dev)."""
    y = np.asarray(y, dtype=bool)
    best, best_t = np.inf, 1.0
    for t in TEMPERATURES:
        s = np.clip(z / t, -_CLIP, _CLIP)
        loss = float(np.mean(np.logaddexp(0.0, s) - np.where(y, s, 0.0)))   # softplus(s) - y s
        if loss < best:
            best, best_t = loss, float(t)
    return best_t


def _objective(y: np.ndarray, z: np.ndarray) -> float:
    """The rule's dev figure: micro-F1 at the dev-tuned threshold plus macro-AUC."""
    from clinicode.metrics import auc_macro, f1_by_threshold

    s = sigmoid(z)
    f1 = float(f1_by_threshold(y, s, np.linspace(0.0, 1.0, 100))["f1_micro"].max())
    return f1 + auc_macro(y, s)[0]


RULE = ("temperatures: lowest dev cross-entropy of each part alone; band weights: coordinate ascent (2 passes, rarest "
        "band first, grid 0, 0.1, ..., 1) on dev micro-F1 at the dev-tuned threshold + dev macro-AUC; ties: the larger "
        "LEAM weight")


RULE_AUC = ("temperatures: lowest dev cross-entropy of each part alone; band weights (LEAM's share, and the title "
            "match's weight): each band's largest dev macro-AUC (grids 0, 0.1, ..., 1 and 0, 1, 2, 4, ..., 32; ties: "
            "the larger LEAM share, the smaller title weight); then each band's scale and bias of the mixed logit: "
            "lowest dev cross-entropy (Platt scaling)")
RULES = {"f1+auc": RULE, "auc+platt": RULE_AUC}
DEFAULT_RULE = "auc+platt"


def _platt(x: np.ndarray, y: np.ndarray, iters: int = 30) -> tuple[float, float]:
    """(scale, bias) of the lowest mean cross-entropy of sigmoid(scale x + bias) against y: Newton's method on the
    two parameters from (1, 0), each step halved until the loss falls, a small ridge towards (1, 0), and the scale
    kept in [0.05, 20] (positive: a band's ranking never flips)."""
    x, t = x.ravel().astype(np.float64), y.ravel().astype(np.float64)
    feats = np.stack([x, np.ones_like(x)], axis=1)                                   # [n, 2]
    ridge, prior = 1e-3, np.array([1.0, 0.0])

    def loss(theta: np.ndarray) -> float:
        s = np.clip(feats @ theta, -_CLIP, _CLIP)
        return float(np.mean(np.logaddexp(0.0, s) - t * s)) + 0.5 * ridge * float(((theta - prior) ** 2).sum())

    def step(theta: np.ndarray) -> np.ndarray:
        p = sigmoid(feats @ theta)
        grad = feats.T @ (p - t) / len(t) + ridge * (theta - prior)
        hess = (feats * (p * (1 - p))[:, None]).T @ feats / len(t) + ridge * np.eye(2)
        return np.linalg.solve(hess, grad)

    def keep_scale(theta: np.ndarray) -> np.ndarray:
        theta[0] = min(max(theta[0], 0.05), 20.0)
        return theta

    theta = _newton(loss, step, prior.copy(), iters=iters, tol=1e-10, project=keep_scale)
    return float(theta[0]), float(theta[1])


def _newton(loss: Callable[[np.ndarray], float], step: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, *,
            iters: int, tol: float, project: Callable[[np.ndarray], np.ndarray] = lambda theta: theta) -> np.ndarray:
    """THETA moved by Newton's STEP (theta -> the step to subtract) at most ITERS times, each step halved (up to 30
    times) until LOSS falls, PROJECT applied to every candidate; it stops once the loss moves less than TOL, or when
    no halving lowers it."""
    current = loss(theta)
    for _ in range(iters):
        delta = step(theta)
        for _ in range(30):
            cand = project(theta - delta)
            got = loss(cand)
            if got <= current:
                break
            delta = delta / 2
        else:
            break
        done = abs(current - got) < tol
        theta, current = cand, got
        if done:
            break
    return theta


def fit_fusion(y_dev: np.ndarray, z_leam: np.ndarray, z_lr: np.ndarray, train_counts: np.ndarray, *,
               rule: str = DEFAULT_RULE, z_title: np.ndarray | None = None) -> Fusion:
    """Temperatures, band weights (and, by RULE "auc+platt", each band's scale and bias) from dev alone (`RULES`).

    Args:
        y_dev: [N_dev, K] 0/1 dev gold.
        z_leam, z_lr: [N_dev, K] each part's dev logits.
        train_counts: [K] training notes per code (the bands).
        z_title: [N_dev, K] the title match of each dev note and code (rule "auc+platt"; None: no title part).
    """
    from clinicode.metrics import auc_macro

    y = np.asarray(y_dev, dtype=bool)
    fusion = Fusion(t_leam=fit_temperature(y, z_leam), t_lr=fit_temperature(y, z_lr), rule=RULES[rule])
    band = bands(train_counts, fusion.edges)
    present = [b for b in range(len(fusion.weights)) if (band == b).any()]
    if rule == "auc+platt":
        for b in present:
            cols = np.flatnonzero(band == b)
            ranked = [c for c in cols if 0 < y[:, c].sum() < len(y)]   # codes whose AUC dev can measure
            if ranked:
                best_w, best_d, best = fusion.weights[b], 0.0, -1.0
                for w in sorted(WEIGHT_GRID, reverse=True):        # ties keep the larger LEAM weight
                    m = w * z_leam[:, ranked] / fusion.t_leam + (1 - w) * z_lr[:, ranked] / fusion.t_lr
                    for d in (TITLE_GRID if z_title is not None else (0.0,)):   # ties: the smaller title weight
                        got = auc_macro(y[:, ranked], m + d * z_title[:, ranked] if d else m)[0]
                        if got > best + 1e-12:
                            best, best_w, best_d = got, w, d
                fusion.weights[b], fusion.title_weights[b] = best_w, best_d
            w, d = fusion.weights[b], fusion.title_weights[b]
            x = w * z_leam[:, cols] / fusion.t_leam + (1 - w) * z_lr[:, cols] / fusion.t_lr
            if d:
                x = x + d * z_title[:, cols]
            fusion.scales[b], fusion.biases[b] = _platt(x, y[:, cols])
        return fusion
    best = _objective(y, fused_logits(z_leam, z_lr, fusion, train_counts))
    for _ in range(PASSES):
        for b in present:
            keep = fusion.weights[b]
            for w in sorted(WEIGHT_GRID, reverse=True):     # larger LEAM weight first: ties keep it
                if w == keep:
                    continue
                fusion.weights[b] = w
                got = _objective(y, fused_logits(z_leam, z_lr, fusion, train_counts))
                if got > best + 1e-12:
                    best, keep = got, w
            fusion.weights[b] = keep
    return fusion


def per_code_offsets(y_dev: np.ndarray, z: np.ndarray, train_counts: np.ndarray, threshold: float, *,
                     rare_below: int = RARE_BELOW, fbr: float = FBR,
                     min_positives: int = MIN_DEV_POSITIVES) -> np.ndarray:
    """[K] logit shifts that give each rare code its own dev-tuned threshold under the global THRESHOLD.

    A code with fewer than RARE_BELOW training notes and at least MIN_POSITIVES dev notes gets the threshold t_k of
    the 100-point grid with its best dev F1 (the first such); if that F1 is below FBR it keeps the global threshold
    (SCutfbr's fallback). Its offset is logit(threshold) - logit(t_k): [score > threshold] after the shift is
    [score > t_k] before it. Every other code's offset is 0.
    """
    from clinicode.metrics import f1_by_threshold

    y = np.asarray(y_dev, dtype=bool)
    s = sigmoid(z)
    offsets = np.zeros(y.shape[1], dtype=np.float64)
    grid = np.linspace(0.0, 1.0, 100)[1:-1]    # 0 and 1 would be infinite shifts
    for k in np.flatnonzero((np.asarray(train_counts) < rare_below) & (y.sum(axis=0) >= min_positives)):
        curve = f1_by_threshold(y[:, k:k + 1], s[:, k:k + 1], grid)["f1_macro_mean"]
        g = int(np.argmax(curve))
        if curve[g] >= fbr:
            offsets[k] = float(logit(np.float64(threshold)) - logit(np.float64(grid[g])))
    return offsets


# A terminology's codes (`train --terminology`): no training note, so they form a band of their own, its numbers fitted
# on dev's codes that no training note carries (the same kind of code, seen by dev) when dev holds at least this many
# of their (note, code) pairs; with fewer, `TERMINOLOGY_DEFAULT`
MIN_TERMINOLOGY_POSITIVES = 5
OFFSET_GRID = tuple(round(float(x), 2) for x in np.linspace(-4.0, 4.0, 33))
TERMINOLOGY_RULE = ("a band of its own from dev's codes that no training note carries: a logistic regression of their "
                    "gold on the title's tf-idf cosine with the note and whether the title is said in it (the weights "
                    "of both, and a bias), then the shift of the grid -4, -3.75, ..., 4 with the best dev micro-F1 of "
                    "every code at the global threshold (ties: the smaller shift)")
TERMINOLOGY_DEFAULT = ("too few dev codes without a training note to fit it: the cosine's weight 8, the said "
                       "title's 4, and a bias that keeps the best title match possible at the global threshold, so "
                       "the codes are ranked, never predicted")


def _logistic(feats: np.ndarray, t: np.ndarray, weight: np.ndarray, *, ridge: float = 1e-6,
              iters: int = 50) -> np.ndarray:
    """[d] the weights of the lowest weighted cross-entropy of sigmoid(feats @ theta) against t (Newton's method from
    0, steps halved until the loss falls, a small ridge on every weight but the last, the bias). FEATS: [n, d], its
    last column ones; WEIGHT: [n] each point's count."""
    wt = weight / weight.sum()
    reg = np.full(feats.shape[1], ridge)
    reg[-1] = 0.0

    def loss(theta: np.ndarray) -> float:
        z = np.clip(feats @ theta, -_CLIP, _CLIP)
        return float(wt @ (np.logaddexp(0.0, z) - t * z)) + 0.5 * float(reg @ theta ** 2)

    def step(theta: np.ndarray) -> np.ndarray:
        p = sigmoid(feats @ theta)
        grad = feats.T @ (wt * (p - t)) + reg * theta
        hess = (feats * (wt * p * (1 - p))[:, None]).T @ feats + np.diag(reg) + 1e-12 * np.eye(len(theta))
        return np.linalg.solve(hess, grad)

    return _newton(loss, step, np.zeros(feats.shape[1]), iters=iters, tol=1e-12)


def fit_terminology(cosine: np.ndarray, said: np.ndarray, y: np.ndarray, threshold: float, *, tp: int, fp: int,
                    fn: int) -> dict[str, Any]:
    """The terminology band's numbers: its codes score sigmoid(scale (cosine + phrase x said) + bias)
    (`TERMINOLOGY_RULE`).

    Args:
        cosine: [n] the tf-idf cosine of each dev (note, code) cell's note and title, for the codes without a training
            note.
        said: [n] 0/1 whether the title is said in the note (`clinicode.codes.terminology.title_phrases`).
        y: [n] 0/1 their gold.
        threshold: the global threshold tuned on dev's other codes.
        tp, fp, fn: those other codes' dev counts at it (the micro-F1 the shift must not lower).
    Returns:
        {"scale", "phrase", "bias", "rule", "dev_positives", "dev_predicted"}: the title match's weight (e), the said
        title's weight inside the title match, and the band's bias.
    """
    c = np.asarray(cosine, dtype=np.float64).ravel()
    f = (np.asarray(said, dtype=np.float64).ravel() > 0).astype(np.float64)
    y = np.asarray(y, dtype=bool).ravel()
    cut = float(logit(np.float64(threshold)))
    positives = int(y.sum())
    if positives < MIN_TERMINOLOGY_POSITIVES:
        scale, phrase = 8.0, 0.5
        return {"scale": scale, "phrase": phrase, "bias": cut - scale * (1.0 + phrase), "rule": TERMINOLOGY_DEFAULT,
                "dev_positives": positives, "dev_predicted": 0}
    # cells with the same (cosine, said) are one weighted point (most have cosine 0 and no title said)
    keys, inverse = np.unique(np.stack([np.round(c, 4), f], axis=1), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    n = np.bincount(inverse).astype(np.float64)
    pos = np.bincount(inverse, weights=y.astype(np.float64))
    feats = np.concatenate([keys, keys])
    feats = np.concatenate([feats, np.ones((len(feats), 1))], axis=1)              # [2u, 3]: cosine, said, 1
    ts = np.concatenate([np.ones(len(keys)), np.zeros(len(keys))])
    ws = np.concatenate([pos, n - pos])
    keep = ws > 0
    w_cos, w_said, bias = _logistic(feats[keep], ts[keep], ws[keep])
    scale = max(float(w_cos), 0.05)                       # the title match's weight: its ranking never flips
    phrase = max(float(w_said), 0.0) / scale              # the said title's weight inside the title match
    z = scale * (keys[:, 0] + phrase * keys[:, 1]) + bias
    best, best_shift, best_pred = -1.0, OFFSET_GRID[0], 0
    for shift in OFFSET_GRID:   # predicted cells: z + shift > cut; one dev micro-F1 of every code per grid point
        on = z + shift > cut
        t_ = tp + float(pos[on].sum())
        f1 = 2 * t_ / max(2 * t_ + fp + float((n - pos)[on].sum()) + fn + positives - float(pos[on].sum()), 1.0)
        if f1 > best + 1e-12:
            best, best_shift, best_pred = f1, shift, int(n[on].sum())
    return {"scale": scale, "phrase": phrase, "bias": float(bias) + best_shift, "rule": TERMINOLOGY_RULE,
            "dev_positives": positives, "dev_predicted": best_pred, "dev_micro_f1": round(best, 6)}
