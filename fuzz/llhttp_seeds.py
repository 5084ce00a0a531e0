#!/usr/bin/env python3
"""Writes llhttp's request cases as raw bytes, one file per case, for the
request_head fuzz target's seed corpus.

usage: llhttp_seeds.py CORPORA_DIR OUT_DIR

CORPORA_DIR is tests/corpus/data (its README describes the format). Bytes as
llhttp's own test/md-test.ts makes them: the http block without one trailing
newline, newlines as CRLF, then \\r \\n \\t \\f \\xNN expanded. Every request
case is taken, the lenient types too (pausing.md only repeats others): the
parser's verdict in the log block does not matter here, since the heads llhttp
rejects or accepts only leniently are the best seeds of all.
"""
import json
import pathlib
import re
import sys

CASE = re.compile(r"<!-- meta=(\{.*?\}) -->\s*```http\n(.*?)```", re.S)
ESCAPE = re.compile(r"\\(r|n|t|f|x[0-9a-fA-F]{2})")


def case_bytes(block: str) -> bytes:
    if block.endswith("\n"):
        block = block[:-1]
    block = block.replace("\n", "\r\n")

    out = bytearray()
    pos = 0
    for m in ESCAPE.finditer(block):  # text as UTF-8, \xNN as the byte itself
        out += block[pos:m.start()].encode("utf-8")
        e = m.group(1)
        out += {"r": b"\r", "n": b"\n", "t": b"\t", "f": b"\f"}.get(e) or bytes([int(e[1:], 16)])
        pos = m.end()
    return bytes(out + block[pos:].encode("utf-8"))


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        return 2
    src = pathlib.Path(sys.argv[1]) / "llhttp" / "test" / "request"
    out = pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for md in sorted(src.glob("*.md")):
        if md.name == "pausing.md":
            continue
        for i, m in enumerate(CASE.finditer(md.read_text(encoding="utf-8"))):
            if not json.loads(m.group(1)).get("type", "").startswith("request"):
                continue
            (out / f"llhttp-{md.stem}-{i:03d}").write_bytes(case_bytes(m.group(2)))
            written += 1
    if written == 0:
        print(f"llhttp_seeds.py: no request cases under {src}", file=sys.stderr)
        return 1
    print(f"llhttp_seeds.py: {written} request heads in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
