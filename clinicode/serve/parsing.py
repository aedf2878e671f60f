"""Request parsing: the body read within its byte and time limits, JSON checked strictly, /v1/predict's notes and the
scoring options (body and query) checked; every problem a `BadRequest` naming it (never a note's text)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Callable, Sequence

from fastapi import Request
from starlette.requests import ClientDisconnect

from clinicode.config import PredictConfig, ServeConfig, kind_of
from clinicode.errors import ConfigError, DataFormatError
from clinicode.fhir import check_subject
from clinicode.records import is_unicode

Limits = ServeConfig  # the per-request limits and batching bounds


class BadRequest(Exception):
    """A client error: HTTP status and a one-line message (what was wrong, what was expected, how to fix it)."""

    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


_NOTE_KEYS = {"id", "text", "subject"}
_BODY_KEYS = {"notes", "top_k", "explain", "threshold"}
_OPTION_KEYS = ("top_k", "explain", "threshold")
_EXAMPLE = 'send {"notes": [{"id": "n1", "text": "..."}]} as application/json'
ANALYZE_EXAMPLE = ('send one DocumentReference as application/fhir+json: {"resourceType": "DocumentReference", '
                   '"id": "note-7", "content": [{"attachment": {"contentType": "text/plain", '
                   '"data": "<the note, base64>"}}]}')
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")  # the JSON escape of a UTF-16 surrogate (paired ones are fine)


class ClientGone(Exception):
    """The client closed its connection before sending the whole request (not the server's error)."""


async def read_body(request: Request, limit: int, timeout: float = 30.0,
                    take: Callable[[int], None] | None = None) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes (declared or streamed), and with 408 when
    it has not all arrived within `timeout` seconds of the request's start (a slow or stalled client). TAKE, when
    given, is told of each chunk's size before it is kept (it may refuse it by raising BadRequest)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body is {int(declared):,} bytes; the limit is {limit:,} (--max-body-mb); "
                              "send fewer or shorter notes per request.")
    loop = asyncio.get_running_loop()
    deadline = request.scope.get("clinicode.start", loop.time()) + timeout
    chunks, size = [], 0
    stream = request.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(stream.__anext__(), max(deadline - loop.time(), 0.0))
        except StopAsyncIteration:
            break
        except asyncio.TimeoutError:
            raise BadRequest(408, f"the request body did not arrive within {timeout:g} s (--read-timeout); send the "
                                  "whole request at once.", headers={"Connection": "close"}) from None
        except ClientDisconnect:
            raise ClientGone() from None
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"request body is over the limit of {limit:,} bytes (--max-body-mb); send fewer or "
                                  "shorter notes per request.")
        if take is not None:
            take(len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


def _no_constant(name: str) -> Any:
    raise BadRequest(400, f"request body holds {name}, which is not JSON (RFC 8259 has no NaN or Infinity); send "
                          "numbers as finite decimals.")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # RFC 8259 leaves duplicate names undefined: Python keeps the last, others the first
        seen: set[str] = set()
        name = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise BadRequest(422, f"request body gives the field {name[:40]!r} twice in one object; give each field "
                              "once.")
    return obj


def parse_json(body: bytes, example: str = _EXAMPLE) -> Any:
    """The JSON value of BODY (UTF-8), or BadRequest: malformed JSON, NaN/Infinity, numbers over Python's 4,300-digit
    limit and nesting deeper than Python's recursion limit are 400s; a lone UTF-16 surrogate (legal JSON, but no
    Unicode text) and a field given twice in one object are 422s naming where or which. EXAMPLE (what to send: the
    route's own) ends the 400s' messages."""
    if not body.strip():
        raise BadRequest(400, f"request body is empty; {example}.")
    try:
        text = body.decode("utf-8-sig")  # JSON over HTTP is UTF-8 (RFC 8259); json.loads would guess UTF-16 from bytes
    except UnicodeDecodeError:
        raise BadRequest(400, f"request body is not UTF-8 text; {example}.") from None
    try:
        obj = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as err:  # its message names a position, never the text
        raise BadRequest(400, f"request body is not valid JSON ({err.msg} at line {err.lineno} column {err.colno}); "
                              f"{example}.") from None
    except ValueError:  # int() of a number over sys.get_int_max_str_digits() digits
        raise BadRequest(400, "request body holds a number too long to read (over 4,300 digits); send numbers of "
                              "ordinary size.") from None
    except RecursionError:
        raise BadRequest(400, "request body is nested too deeply to read; a request is nested "
                              f"a few levels at most: {example}.") from None
    if _SURROGATE.search(text):
        where = _surrogate_at(obj)
        if where is not None:
            raise BadRequest(422, f"{where} holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its "
                                  "pair), which is no Unicode text; send the text as valid UTF-8.")
    return obj


def _surrogate_at(obj: Any) -> str | None:
    """The path ('notes[0].text') of the first string or key holding a lone surrogate, or None (any depth)."""
    todo: list[tuple[str, Any]] = [("request body", obj)]
    while todo:
        path, v = todo.pop()
        if isinstance(v, str):
            if not is_unicode(v):
                return path
        elif isinstance(v, list):
            todo += [(f"{path}[{i}]", x) for i, x in enumerate(v)]
        elif isinstance(v, dict):
            for k, x in v.items():
                if not is_unicode(k):
                    return f"a field name in {path}"
                todo.append((k if path == "request body" else f"{path}.{k}", x))
    return None


def query_options(request: Request, allowed: Sequence[str]) -> dict[str, str]:
    """The query's parameters, each given at most once and each one of ALLOWED (else 422)."""
    q = request.query_params
    for k in q:
        if k not in allowed:
            raise BadRequest(422, f"unknown query parameter {k[:40]!r}; the parameters are "
                                  f"{', '.join(allowed[:-1])} and {allowed[-1]}.")
        if len(q.getlist(k)) > 1:
            raise BadRequest(422, f"query parameter {k!r} is given {len(q.getlist(k))} times; give it once.")
    return dict(q)


def parse_options(top_k: Any, explain: Any, threshold: Any, limits: Limits, *,
                  from_query: bool = False) -> dict[str, Any]:
    """top_k (a positive integer or "all"), explain (0..max_explain) and threshold ([0, 1]) checked by
    `PredictConfig.from_user`, the rule `clinicode predict` uses; absent ones take `predict`'s defaults. Its ConfigError
    is the 422 answer."""
    try:
        cfg = PredictConfig.from_user(top_k=top_k, explain=explain, threshold=threshold,
                                      max_explain=limits.max_explain, source="query" if from_query else "json")
    except ConfigError as err:
        raise BadRequest(422, str(err)) from None
    return {"top_k": cfg.top_k, "explain": cfg.explain, "threshold": cfg.threshold}


def parse_predict(obj: Any, limits: Limits,
                  query: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(notes, options) of a /v1/predict body (options also from QUERY: `merge_options`), or BadRequest naming the first
    problem (never a note's text)."""
    if not isinstance(obj, dict):
        raise BadRequest(422, f"request body is {kind_of(obj)}; {_EXAMPLE}.")
    unknown = sorted(set(obj) - _BODY_KEYS)
    if unknown:
        raise BadRequest(422, f"unknown field {unknown[0][:40]!r}; the fields are notes, top_k, explain and threshold.")
    notes = obj.get("notes")
    if not isinstance(notes, list) or not notes:
        got = "missing" if "notes" not in obj else "empty" if notes == [] else kind_of(notes)
        raise BadRequest(422, f"'notes' is {got}; expected a non-empty list of notes: {_EXAMPLE}.")
    if len(notes) > limits.max_notes:
        raise BadRequest(413, f"{len(notes):,} notes in one request; the limit is {limits.max_notes:,} (--max-notes); "
                              "split them over several requests.")
    out = []
    for i, note in enumerate(notes):
        if not isinstance(note, dict):
            raise BadRequest(422, f"notes[{i}] is {kind_of(note)}; expected an object {{\"id\": ..., \"text\": ...}}.")
        unknown = sorted(set(note) - _NOTE_KEYS)
        if unknown:
            raise BadRequest(422,
                             f"notes[{i}] has an unknown field {unknown[0][:40]!r}; a note has id, text and subject.")
        if "text" not in note or note["text"] is None:
            raise BadRequest(422, f"notes[{i}] has no 'text'; give each note its text as a string.")
        if not isinstance(note["text"], str):
            raise BadRequest(422, f"notes[{i}].text is {kind_of(note['text'])}; expected the note's text as a string.")
        if len(note["text"]) > limits.max_text_chars:
            raise BadRequest(413, f"notes[{i}].text has {len(note['text']):,} characters; the limit is "
                                  f"{limits.max_text_chars:,} (--max-text-chars); shorten or split the note.")
        rid = note.get("id", str(i))
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            raise BadRequest(422, f"notes[{i}].id is {kind_of(rid)}; expected a string (or leave it out).")
        if isinstance(rid, str) and not rid.strip():  # FHIR strings are never empty or blank: the note-id
            # extension would make an invalid Bundle ('\u2028' is no FHIR string)
            raise BadRequest(422, f"notes[{i}].id is {'an empty' if rid == '' else 'a blank'} string; give an id "
                                  "with letters or digits (or leave it out).")
        subject = note.get("subject")
        if subject is not None and not isinstance(subject, (str, dict)):
            raise BadRequest(422,
                             f"notes[{i}].subject is {kind_of(subject)}; expected a reference such as \"Patient/123\" "
                                  "or a FHIR Reference object.")
        try:
            check_subject(subject, f"notes[{i}].subject")
        except DataFormatError as err:
            raise BadRequest(422, str(err)) from None
        out.append({"id": str(rid), "text": note["text"], "subject": subject})
    return out, merge_options(obj, query or {}, limits)


def merge_options(body: dict[str, Any], query: dict[str, str], limits: Limits) -> dict[str, Any]:
    """One rule for both routes: an option may come from the query or the body; given in both, the two must agree
    (else 422), so a client never gets other options than it asked for."""
    opts = parse_options(body.get("top_k"), body.get("explain"), body.get("threshold"), limits)
    if any(k in query for k in _OPTION_KEYS):
        from_query = parse_options(query.get("top_k"), query.get("explain"), query.get("threshold"), limits,
                                   from_query=True)
        for k in _OPTION_KEYS:
            if k in query and k in body and from_query[k] != opts[k]:
                raise BadRequest(422, f"{k} is given in the query ({query[k][:20]}) and in the body "
                                      f"({json.dumps(body[k])[:20]}) with different values; give it once.")
            if k in query:
                opts[k] = from_query[k]
    return opts
