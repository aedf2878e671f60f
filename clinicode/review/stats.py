"""Agreement of the model with coders on finished notes, and what the queue teaches per code (accept and
missed-code rates, routing scores); reports only, nothing is decided here."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from clinicode.errors import ConfigError
from clinicode.review.store import ReviewStore

MIN_ROUTE_DECISIONS = 20             # decided suggestions of one code from one checkpoint before a routing score
ROUTE_TARGET = 0.95                  # the acceptance rate a routing score must reach


def stats(db: ReviewStore, *, by: str = "day", min_decisions: int = MIN_ROUTE_DECISIONS,
          target: float = ROUTE_TARGET, reviewer: str | None = None) -> dict[str, Any]:
    """Agreement of the model with coders on finished notes: overall, per code and per day or week, and what the
    queue teaches per code.

    accepted (suggested, kept: true positives), rejected (suggested, removed: false positives), added (not
    suggested, coded: misses); precision = accepted / (accepted + rejected), recall = accepted / (accepted + added).
    Per code also: `suggested` and `accept_rate` (= precision: how often coders kept the model's suggestion),
    `coded` and `missed_rate` (= added / coded: how often the code was coded without the model suggesting it).
    `from_title`: decisions on codes suggested from their titles (#43), counted apart: never in the model's counts,
    rates or routing. `routing` gives, per checkpoint and per code with at least MIN_DECISIONS decided suggestions,
    the lowest score
    at and above which at least MIN_DECISIONS suggestions were accepted at a rate >= TARGET (`route_threshold`),
    with the decisions behind it. It is a report: nothing is accepted without a coder. REVIEWER: a coder asking; on
    the double-coded notes still blind to them (not adjudicated) only their own decisions are counted in
    `checkpoints` (finished notes, all the other counts read, are never blind).

    Raises:
        ReviewError: the database is damaged (the integrity check runs first).
    """
    if by not in ("day", "week"):
        raise ConfigError(f"--by must be day or week, got {by!r}.")
    db.check_integrity()
    overall = _counts()
    per_code: dict[str, dict[str, Any]] = {}
    per_time: dict[str, dict[str, Any]] = {}
    decided: dict[tuple[str, str], list[tuple[float, bool]]] = {}  # (checkpoint, code) -> (score, accepted)
    title, title_codes = _counts(), {}  # decisions on codes suggested from their titles
    for n in db.finished():
        period = _period(n["done_at"], by)
        bucket = per_time.setdefault(period, _counts())
        bucket["notes"] += 1
        overall["notes"] += 1
        for code, action in n["state"].items():
            kind = {"accept": "accepted", "reject": "rejected", "add": "added"}[action]
            if code in n["from_title"]:  # a suggestion from the title: counted apart, never the model's (#43)
                if kind != "added":
                    title[kind] += 1
                    title_codes.setdefault(code, _counts())[kind] += 1
                continue
            if kind != "added" and code not in n["suggested"]:
                continue  # a withdrawn addition (reject after add) counts for nothing
            entry = per_code.setdefault(code, _counts())
            entry["notes"] += 1  # a code has one final state a note: the notes it was decided on
            for c in (overall, bucket, entry):
                c[kind] += 1
            if kind != "added":
                score, sha = n["scores"][code]
                decided.setdefault((sha, code), []).append((score, kind == "accepted"))
    pending = db.read("SELECT COUNT(*) FROM notes WHERE status != 'done'")[0][0]
    paths = {r[0]: r[1] for r in db.read("SELECT sha256, path FROM models")}
    routing: dict[str, dict[str, Any]] = {}
    for (sha, code), pairs in sorted(decided.items()):
        if len(pairs) >= min_decisions:
            entry = routing.setdefault(sha, {"checkpoint": paths.get(sha, ""), "codes": {}})
            entry["codes"][code] = route_threshold(pairs, target=target, min_decisions=min_decisions)
    made_on: dict[str, int] = {}  # each decision's checkpoint (stored since schema 5; earlier rows: their note's)
    blind = "" if reviewer is None else (  # another coder's decisions on a note still blind to REVIEWER: not shown
        " AND (d.reviewer = :me OR d.note NOT IN (SELECT a.note FROM assignments a JOIN notes n ON n.id = a.note "
        "WHERE a.reviewer = :me AND n.status != 'done'))")
    for r in db.read("SELECT COALESCE(d.checkpoint_sha256, (SELECT s.checkpoint_sha256 FROM suggestions s "
                     "WHERE s.note = d.note LIMIT 1)) AS sha, COUNT(*) FROM decisions d WHERE d.code IS NOT NULL"
                     f"{blind} GROUP BY sha", {"me": reviewer}):
        made_on[r[0] or "unknown"] = r[1]
    return {"checkpoints": {sha: {"checkpoint": paths.get(sha, ""), "decisions": n} for sha, n in made_on.items()},
            "overall": _rates(overall), "per_code": {c: _rates(v) for c, v in sorted(per_code.items())},
            "over_time": {p: _rates(v) for p, v in sorted(per_time.items())}, "by": by, "open_notes": pending,
            "routing": {"target": target, "min_decisions": min_decisions, "by_checkpoint": routing},
            "from_title": {"accepted": title["accepted"], "rejected": title["rejected"],
                           "accept_rate": _rates(title)["accept_rate"],
                           "per_code": {c: {"accepted": v["accepted"], "rejected": v["rejected"]}
                                        for c, v in sorted(title_codes.items())}}}


def route_threshold(pairs: Sequence[tuple[float, bool]], *, target: float = ROUTE_TARGET,
                    min_decisions: int = MIN_ROUTE_DECISIONS) -> dict[str, Any]:
    """The lowest score at and above which coders accepted a code's suggestions at a rate >= TARGET.

    Args:
        pairs: (score, accepted) of every decided suggestion of one code from one checkpoint.
        target: the acceptance rate to reach, in (0, 1].
        min_decisions: the fewest decisions at and above the score that may back it.
    Returns:
        {"threshold", "decisions", "accepted", "rate", "lower_bound", "share", "all_decisions"}: decisions and
        accepted at and above the threshold, their rate and its 95% Wilson lower bound, the share of the code's
        decided suggestions at and above it, and how many there were in all. threshold (and the figures beside it)
        is None when no score reaches TARGET with at least MIN_DECISIONS decisions.
    """
    ranked = sorted(pairs, key=lambda p: -p[0])
    best: dict[str, Any] = {"threshold": None, "decisions": None, "accepted": None, "rate": None,
                            "lower_bound": None, "share": None}
    accepted = 0
    for i, (score, ok) in enumerate(ranked):
        accepted += ok
        n = i + 1
        if n < len(ranked) and ranked[i + 1][0] == score:
            continue  # a cut falls between different scores only
        if n >= min_decisions and accepted / n >= target:
            best = {"threshold": score, "decisions": n, "accepted": accepted, "rate": accepted / n,
                    "lower_bound": _wilson_lower(accepted, n), "share": n / len(ranked)}
    return {**best, "all_decisions": len(ranked)}


def _wilson_lower(k: int, n: int, z: float = 1.96) -> float:
    """The lower end of the 95% Wilson score interval of k successes in n: what the rate is at least, plausibly."""
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * ((p * (1 - p) + z * z / (4 * n)) / n) ** 0.5
    return (centre - spread) / (1 + z * z / n)


def _counts() -> dict[str, Any]:
    return {"notes": 0, "accepted": 0, "rejected": 0, "added": 0}


def _rates(c: dict[str, Any]) -> dict[str, Any]:
    a, r, m = c["accepted"], c["rejected"], c["added"]
    return {**c, "precision": a / (a + r) if a + r else None, "recall": a / (a + m) if a + m else None,
            "suggested": a + r, "accept_rate": a / (a + r) if a + r else None,
            "coded": a + m, "missed_rate": m / (a + m) if a + m else None}


def _period(at: str | None, by: str) -> str:
    if not at:
        return "unknown"
    day = datetime.strptime(at[:10], "%Y-%m-%d")
    if by == "day":
        return day.strftime("%Y-%m-%d")
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"
