"""The review store and the services over it (#45): no import circle inside clinicode.review, only public names
cross its modules, and a bare store serves the services as the CLI's `ReviewDB` does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from clinicode.review import ReviewDB, ReviewError, open_db
from clinicode.review.audit import audit_log
from clinicode.review.decisions import decide
from clinicode.review.stats import stats
from clinicode.review.store import ReviewStore, open_store

REVIEW = Path(__file__).resolve().parents[2] / "clinicode" / "review"
SHA = "c" * 64


def test_no_import_circle_inside_the_review_package():
    """Lazy imports inside functions count: grimp reads every import statement of every module."""
    import grimp

    graph = grimp.build_graph("clinicode", cache_dir=None)
    rooms = {m for m in graph.modules if m.startswith("clinicode.review.")}
    edges = {m: {i for i in graph.find_modules_directly_imported_by(m) if i in rooms} for m in rooms}
    circles = []
    for start in sorted(rooms):
        seen, todo = set(), list(edges[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(edges[m])
        if start in seen:
            circles.append(start)
    assert circles == []
    assert edges["clinicode.review.stats"] == {"clinicode.review.store"}       # a service: the store only
    store = {m for m in rooms if m.startswith("clinicode.review.store")}
    assert len(store) > 1 and all(edges[m] <= store for m in store)           # the store: only itself


def test_only_public_names_cross_the_review_modules():
    """A name with a leading underscore is its module's own: no other module of clinicode/review imports it."""
    crossing = []
    for path in sorted(REVIEW.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clinicode.review"):
                crossing += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert crossing == []


def test_a_bare_store_serves_the_services(tmp_path):
    """The store knows no service; a service takes a bare `ReviewStore` as the CLI's `ReviewDB` (the store with the
    services as methods) on the same file."""
    path = tmp_path / "r.sqlite"
    with open_store(path) as store:
        assert type(store) is ReviewStore and not hasattr(store, "decide")
        store.add_model(SHA, "/runs/x", [("401.9", "Hypertension"), ("428.0", "Heart failure")])
        store.add_notes([("n1", "Hypertension.", {"predicted": [{"code": "401.9", "score": 0.9}]})], sha256=SHA,
                        checkpoint="/runs/x")
        with pytest.raises(ReviewError, match="is not a suggested code"):
            decide(store, "n1", "ann", accept=["428.0"])
        r = decide(store, "n1", "ann", accept=["4019"], add=["428.0"], done=True)
        assert r["codes"] == ["401.9", "428.0"] and r["accepted"] == ["401.9"]
        assert [(d["code"], d["action"], d["source"]) for d in audit_log(store)] == [
            ("401.9", "accept", "model"), ("428.0", "add", "person"), (None, "done", "person")]
        assert stats(store)["overall"]["accepted"] == 1
    with open_db(path, readonly=True) as db:
        assert isinstance(db, ReviewDB)
        assert db.finished()[0]["labels"] == ["401.9", "428.0"] and db.stats()["overall"]["added"] == 1
