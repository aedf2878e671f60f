"""`review assign`, `review adjudicate`, `review agreement`: blind double coding, its final codes, and kappa; `review
show`: one note's suggestions and decisions so far."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from clinicode.cli.options import db_option, evidence_spans
from clinicode.cli.root import friendly
from clinicode.errors import ConfigError


@friendly
def review_assign_cli(
    coder: Annotated[list[str], typer.Option(help="A coder of the notes; give it twice (double coding).")],
    db: Annotated[Optional[str], db_option()] = None,
    id: Annotated[Optional[list[str]], typer.Option("--id", help="A note to double code; repeatable.")] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="Without --id: this many open notes, chosen by "
                                                              "--order.")] = 0,
    order: Annotated[str, typer.Option(help="teach or arrival (as `review next`).")] = "teach",
) -> None:
    """Assign notes to two coders, each blind to the other's decisions, for agreement and adjudication."""
    from clinicode.review import open_db
    from clinicode.review.audit import assign

    if not id and count < 1:
        raise ConfigError("give the notes to double code: --id NOTE (repeatable) or --count N.")
    with open_db(db, create=False) as rdb:
        ids = list(id or [])
        if not ids:
            free = {n["id"] for n in rdb.notes(status=["pending"])} - {r[0] for r in rdb.read(
                "SELECT note FROM assignments")}
            ids = [i for i in rdb.next_notes(len(free) or 1, order=order) if i in free][:count]
        n = assign(rdb, ids, coder)
    typer.echo(f"assigned {n:,} notes to {' and '.join(coder)} (blind double coding)")


@friendly
def review_adjudicate_cli(
    id: Annotated[str, typer.Option("--id", help="The double-coded note.")],
    reviewer: Annotated[str, typer.Option(help="Who adjudicates (not one of its coders).")],
    db: Annotated[Optional[str], db_option()] = None,
    code: Annotated[Optional[list[str]], typer.Option(help="A final code (named by a coder or the model); "
                                                           "repeatable; none: the note has no code.")] = None,
    evidence: Annotated[Optional[list[str]],
                        typer.Option(help="CODE=START:END, the note's characters that justify a final code; "
                                          "repeatable (without it a code keeps its coders' spans).")] = None,
) -> None:
    """Record the final codes of a note both coders finished, and finish it."""
    from clinicode.review import open_db
    from clinicode.review.audit import adjudicate

    spans = evidence_spans(evidence or [])
    with open_db(db, create=False) as rdb:
        r = adjudicate(rdb, id, reviewer, code or [], evidence=spans)
    coders = "; ".join(f"{c}: {', '.join(sorted(a for a, v in s.items() if v in ('accept', 'add'))) or 'none'}"
                       for c, s in sorted(r["coders"].items()))
    typer.echo(f"note {r['note']}: final codes {', '.join(r['codes']) or 'none'} ({coders}); finished")


@friendly
def review_agreement_cli(
    db: Annotated[Optional[str], db_option()] = None,
    reviewer: Annotated[Optional[str], typer.Option(help="A coder asking: the notes still blind to them (double coded, "
                                                         "not adjudicated) are left out.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
) -> None:
    """Double coders' agreement: Cohen's kappa per code, per pair and per coder, and coders' time per note."""
    from clinicode.review import open_db
    from clinicode.review.audit import agreement, median_time, work_times
    from clinicode.review.store import check_reviewer

    reviewer = None if reviewer is None else check_reviewer(reviewer)
    with open_db(db, readonly=True) as rdb:
        rdb.check_integrity()
        a, times = agreement(rdb, reviewer=reviewer), work_times(rdb, reviewer=reviewer)
    median = median_time(times)
    if as_json:
        typer.echo(json.dumps({**a, "time": times, "time_per_note": median}, indent=2))
        return

    def k(x: float | None) -> str:
        return "   -" if x is None else f"{x:5.2f}"

    typer.echo(f"{a['notes']:,} double-coded notes both coders finished ({a['adjudicated']:,} adjudicated, "
               f"{a['waiting']:,} waiting); overall kappa {k(a['overall_kappa'])} over every note x every named code, "
               f"{k(a['overall_kappa_note_codes'])} over each note's own codes")
    if a.get("blind_notes"):
        typer.echo(f"{a['blind_notes']:,} notes {reviewer} double codes are not adjudicated yet: left out (blind)")
    typer.echo(f"{'coder':<20} {'notes':>6} {'kappa with other':>16} {'kappa with final':>16}")
    for c, v in a["per_coder"].items():
        typer.echo(f"{c[:20]:<20} {v['notes']:>6} {k(v['kappa_with_other']):>16} {k(v['kappa_with_final']):>16}")
    if len(a["per_pair"]) > 1:
        typer.echo(f"\n{'pair':<30} {'notes':>6} {'kappa':>6}")
        for p in a["per_pair"]:
            typer.echo(f"{' and '.join(p['coders'])[:30]:<30} {p['notes']:>6} {k(p['kappa']):>6}")
    typer.echo(f"\n{'code':<12} {'first':>6} {'second':>6} {'agree':>6} {'kappa':>6}")
    for c, v in a["per_code"].items():
        typer.echo(f"{c:<12} {v['first']:>6} {v['second']:>6} {v['agree']:>6} {k(v['kappa']):>6}")
    if median["finished"]:
        typer.echo(f"\ntime per note and coder: median {median['median_seconds']:.0f} s over {median['finished']:,} "
                   "finished codings (adjudications not counted)")


@friendly
def review_show_cli(
    id: Annotated[str, typer.Option("--id", help="The note's id.")],
    db: Annotated[Optional[str], db_option()] = None,
    reviewer: Annotated[Optional[str], typer.Option(help="Who asks: on a double-coded note not yet adjudicated, "
                                                         "only their own decisions are shown.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the note as JSON (for scripts).")] = False,
) -> None:
    """One note's suggestions (sources, scores, evidence offsets) and the decisions so far; never its text."""
    from clinicode.review import open_db
    from clinicode.review.audit import show

    with open_db(db, readonly=True) as rdb:
        n = show(rdb, id, reviewer=reviewer)
    if as_json:
        typer.echo(json.dumps(n, indent=2))
        return

    def spans(items: list[dict]) -> str:
        return " ".join(f"{e['start']}:{e['end']}" for e in items) or "-"

    coders = f"; double coded by {' and '.join(n['coders'])}{' (blind)' if n['blind'] else ''}" if n["coders"] else ""
    typer.echo(f"note {n['id']}: {n['status'].replace('_', ' ')}, queued {n['queued_at']}{coders}")
    typer.echo(f"{'rank':>4} {'code':<12} {'score':>6} {'source':<6} evidence (character offsets)")
    for s in n["suggestions"]:
        mark = " (from the terminology)" if s["terminology"] else ""   # no training note carried the code
        typer.echo(f"{s['rank']:>4} {s['code']:<12} {s['score']:>6.3f} {s['source']:<6} {spans(s['evidence'])}"
                   f"{mark}")
    hidden = " (none shown: blind until adjudicated)" if n["blind"] and not n["log"] else ""
    typer.echo(f"decisions so far: {len(n['log']):,}{hidden}")
    for r in n["log"]:
        what = f"{r['action']} {r['code']}" if r["code"] else r["action"]
        marked = f" spans {spans([{'start': a, 'end': b} for a, b in r['spans']])}" if r["spans"] else ""
        source = f" ({r['source']})" if r["source"] else ""
        typer.echo(f"  {r['at']}  {r['reviewer']}: {what}{source}{marked}")
