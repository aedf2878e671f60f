"""Option helpers of the commands: options that stay None so config.py's defaults apply (`opt`, `given`), and option
groups, dataclasses whose fields are Typer options, flattened into a command's parameters (`option_groups`)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from typing import Any, Callable

import typer

from clinicode.errors import ConfigError


def opt(help: str, default: Any = None, *decls: str, **kw: Any) -> Any:
    """An option that stays None unless given, so the library's default (clinicode/config.py) applies;
    --help shows it."""
    return typer.Option(*decls, help=help, show_default=False if default is None else str(default), **kw)


def given(**options: Any) -> dict[str, Any]:
    """The options the user gave (not None): the rest fall through to the defaults in clinicode/config.py."""
    return {k: v for k, v in options.items() if v is not None}


def formats_help(table: dict) -> str:
    """The registered formats of `table` (READERS or WRITERS) for an option's help: `name (what it is)`, ..."""
    return ", ".join(f"{name} ({fmt.what})" for name, fmt in table.items())


def option_groups(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: each parameter of `fn` typed as a dataclass stands for its fields, which Typer sees as options (in
    field order, in place of the parameter); `fn` is called with the dataclasses filled in.

    A field is declared as a parameter would be (`name: Annotated[type, typer.Option(...)] = default`), so --help,
    option names and defaults are the same as if the command listed them all. Field names must not repeat.
    """
    hints = typing.get_type_hints(fn, include_extras=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, tuple[type, list[str]]] = {}
    for p in inspect.signature(fn).parameters.values():
        kind = hints[p.name]
        if dataclasses.is_dataclass(kind):
            types = typing.get_type_hints(kind, include_extras=True)
            fields = dataclasses.fields(kind)
            groups[p.name] = (kind, [f.name for f in fields])
            params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=types[f.name],
                                         default=inspect.Parameter.empty if f.default is dataclasses.MISSING
                                         else f.default) for f in fields]
        else:
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=kind))
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise TypeError(f"{fn.__name__}: an option name repeats across its groups: {sorted(names)}")

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        filled = {name: kind(**{f: kwargs.pop(f) for f in fields}) for name, (kind, fields) in groups.items()}
        return fn(**filled, **kwargs)

    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # what Typer reads
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


_DB_HELP = "Review database file (SQLite; holds note text; created owner-only). Default: $CLINICODE_REVIEW_DB."


def db_option() -> Any:
    """`review`'s --db: the database file, or $CLINICODE_REVIEW_DB."""
    return typer.Option("--db", help=_DB_HELP, envvar="CLINICODE_REVIEW_DB", show_envvar=False)


def evidence_spans(given: list[str]) -> dict[str, list[tuple[int, int]]]:
    """--evidence CODE=START:END options as {code: [(start, end), ...]} (a code may repeat); the note's length and
    the codes are checked by `decide`."""
    out: dict[str, list[tuple[int, int]]] = {}
    for item in given:
        code, _, where = item.partition("=")
        start, _, end = where.partition(":")
        if not (code.strip() and all(x.strip().isascii() and x.strip().isdigit() for x in (start, end))):
            raise ConfigError(f"--evidence {item[:60]!r}: expected CODE=START:END, a code and two character offsets "
                              "into the note, e.g. --evidence 428.0=120:133 (nothing was saved).")
        out.setdefault(code.strip(), []).append((int(start), int(end)))
    return out
