"""The `clinicode` Typer app, its --version and --verbose, and `friendly`: a ClinicodeError or OS error becomes one
line on stderr and exit status 1 (Typer uses 2 for malformed command lines); anything unexpected keeps its traceback."""

from __future__ import annotations

import functools
import logging
import sys
from typing import Annotated, Any, Callable

import typer

from clinicode import __version__
from clinicode.errors import ClinicodeError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Automated ICD coding of clinical notes. The default model fuses, per code, LEAM, a tf-idf "
                       "logistic regression, a title match and the mentions coders marked in the training notes.")


def os_error_message(err: OSError) -> str:
    """One line for an operating-system error (a path that is missing, of the wrong kind, unwritable, a full disk)."""
    where = " -> ".join(str(f) for f in (err.filename, err.filename2) if f is not None)
    what = err.strerror or type(err).__name__
    return (f"{what}{f': {where}' if where else ''} ({type(err).__name__}); check that the path "
            "exists, is the right kind "
            "(file or folder) and can be written, and that the disk has room.")


EXIT_EPIPE = 141  # 128 + SIGPIPE: what a shell shows for a writer whose reader closed the pipe (`yes | head -1`)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush into a closed pipe raises nothing."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # stdout is not a file descriptor (a test runner's buffer): nothing will be flushed into a pipe


def friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """ClinicodeError and expected OS errors -> one line on stderr and status 1; anything else is a bug and keeps
    its traceback."""
    import inspect

    # only a command that has --resume may advise it (review queue says its own; decide, stats and export need none)
    hint = " (use --resume to continue)" if "resume" in inspect.signature(fn).parameters else ""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ClinicodeError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(1) from None
        except BrokenPipeError:
            _quiet_stdout()  # the reader left (`| head`): no message, and none at exit when Python flushes stdout
            raise typer.Exit(EXIT_EPIPE) from None
        except OSError as err:
            typer.echo(f"error: {os_error_message(err)}", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            to_stdout = str(kwargs.get("output", "")) == "-"  # predict to stdout: nothing to continue
            typer.echo(f"interrupted; outputs written so far are intact{'' if to_stdout else hint}", err=True)
            raise typer.Exit(130) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"clinicode {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress details to stderr.")] = False,
) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
