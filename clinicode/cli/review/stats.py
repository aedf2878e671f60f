"""`review stats`: the model's agreement with coders on finished notes, per code, over time, per checkpoint, and the
scores at which suggestions were accepted."""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer

from clinicode.cli.options import db_option
from clinicode.cli.root import friendly


def _pct(x: float | None) -> str:
    return "   -  " if x is None else f"{x:6.1%}"


def _row(name: str, v: dict[str, Any]) -> str:
    return (f"{name:<12} {v['accepted']:>8,} {v['rejected']:>8,} {v['added']:>8,} {_pct(v['precision']):>9} "
            f"{_pct(v['recall']):>7}")


def _print_agreement(s: dict[str, Any], by: str) -> None:
    """Accepted, rejected, added, precision and recall: overall, per code, per period; the queue's teaching rates."""
    head = f"{'':<12} {'accepted':>8} {'rejected':>8} {'added':>8} {'precision':>9} {'recall':>7}"
    o = s["overall"]
    typer.echo(f"{o['notes']:,} finished notes, {s['open_notes']:,} still open")
    typer.echo(head)
    typer.echo(_row("overall", o))
    typer.echo("\nper code")
    for code, v in s["per_code"].items():
        typer.echo(_row(code, v))
    typer.echo(f"\nper {by}")
    for period, v in s["over_time"].items():
        typer.echo(_row(period, v))
    typer.echo("\nwhat the queue teaches, per code (accept rate: suggestions coders kept; missed rate: codings "
               "the model did not suggest)")
    typer.echo(f"{'':<12} {'suggested':>9} {'accept rate':>11} {'coded':>8} {'missed rate':>11}")
    for code, v in s["per_code"].items():
        typer.echo(f"{code:<12} {v['suggested']:>9,} {_pct(v['accept_rate']):>11} {v['coded']:>8,} "
                   f"{_pct(v['missed_rate']):>11}")


def _print_routing(s: dict[str, Any]) -> None:
    """Decisions per checkpoint, and per code the score at and above which its suggestions were accepted."""
    typer.echo("\ndecisions per checkpoint (the one whose suggestions the note showed)")
    for sha, c in s["checkpoints"].items():
        typer.echo(f"{sha[:12]:<12} {c['decisions']:>8,}  {c['checkpoint']}")
    r = s["routing"]
    typer.echo(f"\nscores at and above which suggestions were accepted >= {r['target']:.0%} (codes with >= "
               f"{r['min_decisions']} decided suggestions from one checkpoint; a report: nothing is accepted "
               "without a coder)")
    if not r["by_checkpoint"]:
        typer.echo(f"no code has {r['min_decisions']} decided suggestions from one checkpoint yet")
    for entry in r["by_checkpoint"].values():
        typer.echo(f"checkpoint {entry['checkpoint']}")
        typer.echo(f"{'':<12} {'score >=':>8} {'decisions':>9} {'accepted':>8} {'95% low':>7} {'share':>6} {'of':>5}")
        for code, t in entry["codes"].items():
            if t["threshold"] is None:
                typer.echo(f"{code:<12} {'never':>8} {'':>9} {'':>8} {'':>7} {'':>6} {t['all_decisions']:>5,}")
            else:
                typer.echo(f"{code:<12} {t['threshold']:>8.3f} {t['decisions']:>9,} {_pct(t['rate']):>8} "
                           f"{_pct(t['lower_bound']):>7} {t['share']:>6.0%} {t['all_decisions']:>5,}")


@friendly
def review_stats_cli(
    db: Annotated[Optional[str], db_option()] = None,
    by: Annotated[str, typer.Option(help="Period of the over-time table: day or week.")] = "day",
    reviewer: Annotated[Optional[str], typer.Option(help="A coder asking: another coder's decisions on notes they "
                                                         "double code are not counted until adjudicated.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
) -> None:
    """Agreement of the model with coders on finished notes: accepted, rejected, added; precision and recall."""
    from clinicode.review import open_db
    from clinicode.review.store import check_reviewer

    reviewer = None if reviewer is None else check_reviewer(reviewer)
    with open_db(db, readonly=True) as rdb:
        s = rdb.stats(by=by, reviewer=reviewer)
    if as_json:
        typer.echo(json.dumps(s, indent=2))
        return
    _print_agreement(s, by)
    _print_routing(s)
    ft = s["from_title"]
    typer.echo(f"\nsuggested from the title (codes the model lacks; not in the counts above): {ft['accepted']:,} "
               f"accepted, {ft['rejected']:,} rejected, accept rate {_pct(ft['accept_rate'])}")
    for code, v in ft["per_code"].items():
        typer.echo(f"{code:<12} {v['accepted']:>8,} {v['rejected']:>8,}")
