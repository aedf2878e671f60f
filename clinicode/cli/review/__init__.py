"""`clinicode review`: a coder's review queue (docs/review.md); its subcommands, one module a topic, registered here
in --help order."""

import typer

from clinicode.cli.review.audit import (
    review_adjudicate_cli,
    review_agreement_cli,
    review_assign_cli,
    review_show_cli,
)
from clinicode.cli.review.export import review_export_cli, review_retrain_cli
from clinicode.cli.review.queue import review_decide_cli, review_next_cli, review_queue_cli, review_rescore_cli
from clinicode.cli.review.stats import review_stats_cli

review_app = typer.Typer(no_args_is_help=True, help="A coder's review queue: queue scored notes, record decisions, "
                         "export corrections for training, report agreement (docs/review.md).")

for _name, _command in (("queue", review_queue_cli), ("decide", review_decide_cli), ("show", review_show_cli),
                        ("next", review_next_cli),
                        ("assign", review_assign_cli), ("adjudicate", review_adjudicate_cli),
                        ("agreement", review_agreement_cli), ("retrain", review_retrain_cli),
                        ("rescore", review_rescore_cli), ("export", review_export_cli), ("stats", review_stats_cli)):
    review_app.command(_name)(_command)
