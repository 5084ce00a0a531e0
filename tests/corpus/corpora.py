"""Reading the external corpora into cases.

llhttp (test/request/*.md and test/response/*.md): the `http` block of each
`type: request` or `type: response` case, turned into bytes exactly as
llhttp's own test driver does, with its `log` block: how many messages llhttp
completes, where it stops with an error, and the byte spans it reports.

http-desync-guardian (tests/*.yaml): one request per case, written out as
`METHOD SP URI SP VERSION CRLF`, one `name: value CRLF` line per header, a
blank line, then a body when the headers frame one, with the expected tier.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re

import yaml


@dataclasses.dataclass
class Span:
    kind: str  # "body", "method", "status", ...
    off: int
    length: int


@dataclasses.dataclass
class Case:
    id: str  # stable name: "<corpus>/<file>#<heading>"
    source: str  # "llhttp" or "guardian"
    data: bytes  # what goes on the wire
    # llhttp
    error: str | None = None  # "code=N reason=..." when llhttp rejects it
    error_off: int | None = None
    messages: int = 0  # messages llhttp completes (before any error)
    heads: int = 0  # message heads llhttp completes (before any error)
    spans: list[Span] = dataclasses.field(default_factory=list)
    log: list[str] = dataclasses.field(default_factory=list)
    methods: list[str] = dataclasses.field(default_factory=list)  # one per request
    # guardian
    tier: str | None = None
    reason: str | None = None
    upstream_has: bytes | None = None  # Sluice's own cases: bytes the upstream must get

    @property
    def expected_responses(self) -> int:
        if self.source == "guardian":
            return 1
        return self.messages + (1 if self.error else 0)


# ---------------------------------------------------------------- llhttp

_META = re.compile(r"<!--\s*meta=(\{.*\})\s*-->")
_SPAN = re.compile(r'^off=(\d+) len=(\d+) span\[(\w+)\]=(?:"(.*)"|\w+)$')
_ERROR = re.compile(r"^off=(\d+) error (code=\d+ reason=.*)$")


def llhttp_bytes(block: str) -> bytes:
    """The bytes of an `http` block, made as llhttp's test/md-test.ts makes them."""
    s = block[:-1] if block.endswith("\n") else block  # one trailing newline goes
    s = re.sub(r"\\(\r\n|\r|\n)", "", s)  # escaped newlines join lines
    s = re.sub(r"\r\n|\r|\n", "\r\n", s)  # every newline is CRLF
    s = s.replace("\\r", "\r").replace("\\n", "\n").replace("\\t", "\t").replace("\\f", "\f")
    s = re.sub(r"\\x([0-9a-fA-F]+)", lambda m: chr(int(m.group(1), 16)), s)
    s = re.sub(r"\\([0-7]{1,3})", lambda m: chr(int(m.group(1), 8)), s)
    if "${" in s:
        raise ValueError("inline JavaScript in a case is not supported")
    # The driver hands the string to the parser as UTF-8 (the logs' offsets
    # count so: "\\xff" is two bytes), and so does this.
    return s.encode("utf-8")


def _blocks(text: str):
    """(heading, meta, lang, body) for each fenced block, in order."""
    heading = ""
    meta = None
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            meta = None
        elif (m := _META.search(line)) is not None:
            meta = json.loads(m.group(1))
        elif line.startswith("```"):
            lang = line[3:].strip()
            body = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            yield heading, meta, lang, "\n".join(body) + "\n"
            if lang == "http":
                meta = None
        i += 1


def load_llhttp(root: pathlib.Path, kind: str) -> list[Case]:
    """kind: "request" or "response"; pausing.md is left out (it tests llhttp's API)."""
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for path in sorted((root / "test" / kind).glob("*.md")):
        if path.name == "pausing.md":
            continue
        pending = None
        for heading, meta, lang, body in _blocks(path.read_text(encoding="utf-8")):
            if lang == "http":
                pending = (heading, meta, body) if meta and meta.get("type") == kind else None
            elif lang == "log" and pending is not None:
                heading, meta, http_block = pending
                pending = None
                if meta.get("skipBody") or meta.get("pause"):
                    continue  # API features of llhttp, not wire behaviour
                cid = f"llhttp/{kind}/{path.name}#{heading}"
                seen[cid] = seen.get(cid, 0) + 1
                if seen[cid] > 1:
                    cid += f" ({seen[cid]})"
                case = _llhttp_case(cid, llhttp_bytes(http_block), body)
                if kind == "request":
                    case.data = with_host(case)
                    case.data = end_head(case)
                cases.append(case)
    return cases


def end_head(case: Case) -> bytes:
    """A case llhttp rejects inside a head that its bytes never end (llhttp
    stops at the bad byte; a proxy reads the whole head first) gets the end of
    its head, as the client would send it next: CRLF up to a blank line."""
    if case.error is None or case.heads > case.messages or case.data.endswith(b"\r\n\r\n"):
        return case.data
    return case.data + (b"\r\n" if case.data.endswith(b"\r\n") else b"\r\n\r\n")


def with_host(case: Case, host: bytes = b"corpus.test") -> bytes:
    """The case's bytes with `Host: <host>` after the request line of each
    HTTP/1.1 message llhttp read that has none. llhttp's cases carry no Host;
    RFC 9112 section 3.2 makes a server refuse an HTTP/1.1 request without one,
    and every proxy measured does, so without it every case would be refused for
    that alone. The place comes from llhttp's log (where the version ends), so
    a malformed request line is never touched: it gets nothing."""
    inserts: list[int] = []
    version = None
    version_end = None
    has_host = False

    def close_message():
        if version == b"1.1" and version_end is not None and not has_host:
            at = version_end
            if case.data[at:at + 2] == b"\r\n":
                inserts.append(at + 2)

    for line in case.log:
        if line.endswith(" message begin"):
            close_message()
            version, version_end, has_host = None, None, False
        elif line.endswith(" version complete"):
            version_end = int(line.split()[0][4:])
        elif (m := _SPAN.match(line)) is not None:
            text = case.data[int(m.group(1)):int(m.group(1)) + int(m.group(2))]
            if m.group(3) == "version":
                version = text
            elif m.group(3) == "header_field" and text.lower() == b"host":
                has_host = True
    close_message()
    data = case.data
    for at in sorted(inserts, reverse=True):
        data = data[:at] + b"Host: " + host + b"\r\n" + data[at:]
    return data


def _llhttp_case(cid: str, data: bytes, log: str) -> Case:
    c = Case(id=cid, source="llhttp", data=data)
    for line in log.splitlines():
        line = line.strip()
        if not line:
            continue
        c.log.append(line)
        if (m := _ERROR.match(line)) is not None:
            c.error_off = int(m.group(1))
            c.error = m.group(2)
            break
        if line.endswith(" message complete"):
            c.messages += 1
        elif " headers complete " in line:
            c.heads += 1
        elif (m := _SPAN.match(line)) is not None:
            c.spans.append(Span(m.group(3), int(m.group(1)), int(m.group(2))))
    # The method of each request, from the bytes llhttp marked as the method
    # (its spans may come in pieces; a new one starts after each message).
    for s in c.spans:
        if s.kind == "method":
            c.methods.append(data[s.off:s.off + s.length].decode("latin-1"))
    return c


def message_bodies(case: Case) -> list[bytes]:
    """The body bytes llhttp reported, per message (from the log's offsets)."""
    out: list[bytes] = []
    cur = b""
    msg = 0
    for line in case.log:
        if line.endswith(" message complete"):
            out.append(cur)
            cur = b""
            msg += 1
        elif (m := _SPAN.match(line)) is not None and m.group(3) == "body":
            off, n = int(m.group(1)), int(m.group(2))
            cur += case.data[off:off + n]
    if cur:
        out.append(cur)  # a body without its message end (read until close)
    return out


def message_statuses(case: Case) -> list[int]:
    return [int(m.group(1)) for line in case.log
            if (m := re.search(r" headers complete status=(\d+)", line)) is not None]


# ---------------------------------------------------------------- http-desync-guardian


def _text(v) -> bytes:
    if v is None:
        return b""
    if isinstance(v, bool):
        v = "true" if v else "false"
    return str(v).encode("latin-1", errors="strict") if all(ord(ch) < 256 for ch in str(v)) \
        else str(v).encode("utf-8")


def guardian_bytes(t: dict, host: bytes) -> bytes:
    """The wire form of one desync-guardian case. A Host header is added when
    the case has none (HTTP/1.1 requires one; the corpus classifies header
    semantics, not the presence of Host)."""
    method = _text(t.get("method"))
    uri = _text(t.get("uri"))
    version = _text(t.get("version"))
    line = method + b" " + uri + (b" " + version if version else b"") + b"\r\n"
    headers = t.get("headers") or []
    out = [line]
    has_host = any(str(h.get("name", "")).lower() == "host" for h in headers)
    if not has_host and version:
        out.append(b"Host: " + host + b"\r\n")
    for h in headers:
        out.append(_text(h.get("name")) + b": " + _text(h.get("value")) + b"\r\n")
    out.append(b"\r\n")
    out.append(_guardian_body(headers))
    return b"".join(out)


def _guardian_body(headers: list[dict]) -> bytes:
    """A body for the framing the headers state as a plain reading sees it: the
    last chunk when the last transfer coding is chunked, else as many bytes as a
    single plain Content-Length says (nothing otherwise)."""
    te = [str(h.get("value", "")) for h in headers if str(h.get("name", "")).strip().lower() == "transfer-encoding"]
    cl = [str(h.get("value", "")).strip() for h in headers if str(h.get("name", "")).lower() == "content-length"]
    if te:
        codings = [c.split(";")[0].strip().lower() for c in ",".join(te).split(",") if c.strip()]
        if codings and codings[-1] == "chunked":
            return b"0\r\n\r\n"
    values = {v.strip() for c in cl for v in c.split(",")}
    if len(values) == 1 and (n := values.pop()).isdigit() and int(n) <= 8 << 20:
        return b"A" * int(n)
    return b""


def load_guardian(root: pathlib.Path, host: bytes = b"corpus.test") -> list[Case]:
    paths = [p for p in sorted((root / "tests").glob("*.yaml"))
             if p.name != "single-case.yaml"]  # the corpus's scratch file: a copy of a case in ambiguous.yaml
    return load_tiered(paths, "guardian", host)


def load_tiered(paths: list[pathlib.Path], prefix: str, host: bytes = b"corpus.test") -> list[Case]:
    """Cases in http-desync-guardian's format, named "<prefix>/<file>#<name>"."""
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for path in paths:
        for t in yaml.safe_load(path.read_text(encoding="utf-8")) or []:
            cid = f"{prefix}/{path.name}#{t['name']}"
            seen[cid] = seen.get(cid, 0) + 1
            if seen[cid] > 1:
                cid += f" ({seen[cid]})"
            exp = t.get("expected") or {}
            cases.append(Case(id=cid, source="guardian", data=guardian_bytes(t, host),
                              tier=exp.get("tier"), reason=exp.get("reason"),
                              upstream_has=_text(t["upstream_has"]) if t.get("upstream_has") else None,
                              methods=[str(t.get("method"))]))
    return cases
