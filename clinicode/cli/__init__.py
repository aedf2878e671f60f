"""The `clinicode` command line: one module per command, registered here in --help order. `main` is the console
script (pyproject.toml: clinicode.cli:main) and what `python -m clinicode` runs."""

from clinicode.cli.compare import compare_cli
from clinicode.cli.demo_data import demo_data_cli
from clinicode.cli.evaluate import evaluate_cli
from clinicode.cli.predict import predict_cli
from clinicode.cli.prepare import prepare_cli
from clinicode.cli.review import review_app
from clinicode.cli.root import app
from clinicode.cli.serve import serve_cli
from clinicode.cli.train import train_cli

for _name, _command in (("prepare", prepare_cli), ("demo-data", demo_data_cli), ("train", train_cli),
                        ("evaluate", evaluate_cli), ("compare", compare_cli), ("predict", predict_cli),
                        ("serve", serve_cli)):
    app.command(_name)(_command)
app.add_typer(review_app, name="review")


def main() -> None:
    """Console-script entry point."""
    app()
