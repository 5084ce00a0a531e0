"""HTTP/1.1 reading for the corpus runner, on both sides of the proxy.

`read_requests` is the recording upstream's reader, and strict on purpose: it
reads what a proxy forwarded and names every ambiguity in it (RFC 9112's
grammar, with nothing a lenient parser would paper over). Anything it names is
framing an upstream could read differently from the proxy.

`read_responses` is the client's reader: it only needs to count and frame the
proxy's answers, and it is lenient.
"""

from __future__ import annotations

import dataclasses
import re

TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_REQUEST_LINE = re.compile(rb"^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) HTTP/1\.[01]$")
_HEX = re.compile(rb"^[0-9A-Fa-f]+$")
_CHUNK_EXT = re.compile(rb"^(?:[ \t]*;[ \t]*[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
                        rb"(?:[ \t]*=[ \t]*(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+|\"(?:[^\"\\\x00-\x08\x0a-\x1f\x7f]|\\[\t\x20-\x7e\x80-\xff])*\"))?)*$")


@dataclasses.dataclass
class Request:
    method: bytes
    target: bytes
    version: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    end: int  # offset just past it in the connection's bytes

    def header(self, name: bytes) -> list[bytes]:
        return [v for n, v in self.headers if n.lower() == name]


@dataclasses.dataclass
class RequestRead:
    requests: list[Request]
    ambiguities: list[str]  # empty when every byte read was unambiguous
    head_pending: bool  # a head that has started but not ended


def _field_problems(line: bytes, where: str) -> list[str]:
    if line[:1] in (b" ", b"\t"):
        return [f"obs-fold in {where}"]
    name, colon, value = line.partition(b":")
    out = []
    if not colon:
        return [f"{where} line without a colon: {line[:40]!r}"]
    if not name or any(c not in TCHAR for c in name):
        out.append(f"non-token {where} name {name[:40]!r}")
    for c in value:
        if c == 0:
            out.append(f"NUL in {where} value")
            break
        if (c < 0x20 and c != 0x09) or c == 0x7F:
            out.append(f"CTL 0x{c:02x} in {where} value")
            break
    return out


def _line_endings(head: bytes) -> list[str]:
    out = []
    for i, c in enumerate(head):
        if c == 0x0D and head[i + 1:i + 2] != b"\n":
            out.append("bare CR")
            break
    for i, c in enumerate(head):
        if c == 0x0A and (i == 0 or head[i - 1] != 0x0D):
            out.append("bare LF")
            break
    if 0 in head:
        out.append("NUL")
    return out


def _chunked(data: bytes, pos: int) -> tuple[int | None, bytes, list[str]]:
    """(end or None when incomplete, body, ambiguities) of a chunked body at pos."""
    body = b""
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            if b"\n" in data[pos:] or len(data) - pos > 4096:
                return None, body, ["bad chunk size line"]
            return None, body, []
        line = data[pos:eol]
        size, semi, ext = line.partition(b";")
        ext = semi + ext
        if not _HEX.match(size) or len(size) > 16 or not _CHUNK_EXT.match(ext) or b"\n" in line or b"\r" in line:
            return None, body, [f"bad chunk size line {line[:40]!r}"]
        n = int(size, 16)
        pos = eol + 2
        if n == 0:
            break
        if len(data) < pos + n + 2:
            return None, body, []
        body += data[pos:pos + n]
        if data[pos + n:pos + n + 2] != b"\r\n":
            return None, body, ["chunk data not followed by CRLF"]
        pos += n + 2
    # trailer section
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            return None, body, []
        line = data[pos:eol]
        pos = eol + 2
        if not line:
            return pos, body, []
        probs = _line_endings(line) + _field_problems(line, "trailer")
        if probs:
            return None, body, probs


def read_requests(data: bytes) -> RequestRead:
    """Every complete request in one connection's bytes, read strictly; reading
    stops at the first ambiguity (what follows could be framed either way)."""
    reqs: list[Request] = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\r\n\r\n", pos)
        head = data[pos:] if end < 0 else data[pos:end + 2]
        probs = _line_endings(head)
        lines = head.split(b"\r\n")
        if end < 0:
            # Not ended yet: what is there may already be wrong.
            if probs:
                return RequestRead(reqs, probs, True)
            return RequestRead(reqs, [], True)
        lines = lines[:-1]
        m = _REQUEST_LINE.match(lines[0])
        if m is None:
            probs.append(f"non-canonical request line {lines[0][:60]!r}")
            return RequestRead(reqs, probs, False)
        headers = []
        for line in lines[1:]:
            probs += _field_problems(line, "header")
            name, _, value = line.partition(b":")
            headers.append((name, value.strip(b" \t")))
        version = lines[0].rsplit(b" ", 1)[1]
        req = Request(m.group(1), m.group(2), version, headers, b"", 0)
        te = req.header(b"transfer-encoding")
        cl = req.header(b"content-length")
        chunked = False
        if te and cl:
            probs.append("Content-Length with Transfer-Encoding")
        if len(cl) > 1:
            probs.append("two Content-Lengths")
        if cl and not re.match(rb"^[0-9]+$", cl[0]):
            probs.append(f"bad Content-Length {cl[0][:30]!r}")
        if te:
            codings = [c.strip(b" \t").lower() for c in b",".join(te).split(b",")]
            if version == b"HTTP/1.0":
                probs.append("Transfer-Encoding on HTTP/1.0")
            if not codings or codings[-1] != b"chunked":
                probs.append("Transfer-Encoding not ending in chunked")
            if codings.count(b"chunked") > 1:
                probs.append("chunked applied twice")
            chunked = True
        if probs:
            return RequestRead(reqs, probs, False)
        pos = end + 4
        if chunked:
            body_end, body, p = _chunked(data, pos)
            if p:
                return RequestRead(reqs, p, False)
            if body_end is None:
                return RequestRead(reqs, [], False)
            req.body, pos = body, body_end
        elif cl:
            n = int(cl[0])
            if len(data) < pos + n:
                return RequestRead(reqs, [], False)
            req.body, pos = data[pos:pos + n], pos + n
        req.end = pos
        reqs.append(req)
        if req.method == b"CONNECT":
            break  # what follows is the tunnel's, not HTTP
    return RequestRead(reqs, [], False)


# ---------------------------------------------------------------- responses


@dataclasses.dataclass
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    complete: bool
    head: bytes = b""

    def header(self, name: bytes) -> list[bytes]:
        return [v for n, v in self.headers if n.lower() == name]


def read_responses(data: bytes, methods: list[str], closed: bool) -> tuple[list[Response], list[Response]]:
    """(final responses, interim 1xx responses) in what the client received.
    The i-th final response answers the i-th request (its method decides
    whether a body follows). A body framed by the close is complete only when
    the connection closed; a malformed answer ends the reading."""
    finals: list[Response] = []
    interim: list[Response] = []
    pos = 0
    while pos < len(data):
        while data.startswith(b"\r\n", pos):
            pos += 2  # empty lines before a status line
        end = data.find(b"\r\n\r\n", pos)
        if end < 0:
            break
        lines = data[pos:end].split(b"\r\n")
        m = re.match(rb"^[A-Z]+/\d\.\d (\d{3})(?: .*)?$", lines[0])
        if m is None:
            break
        status = int(m.group(1))
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers.append((name, value.strip(b" \t")))
        res = Response(status, headers, b"", False, data[pos:end + 4])
        pos = end + 4
        if 100 <= status < 200 and status != 101:
            res.complete = True
            interim.append(res)
            continue
        method = methods[len(finals)] if len(finals) < len(methods) else "GET"
        codings = [c.strip(b" \t") for c in b",".join(res.header(b"transfer-encoding")).lower().split(b",")]
        cl = res.header(b"content-length")
        if method == "HEAD" or status in (204, 304) or status == 101:
            res.complete = True
        elif codings[-1] == b"chunked":
            body_end, body, probs = _chunked(data, pos)
            res.body = body
            if body_end is not None and not probs:
                res.complete, pos = True, body_end
        elif cl and cl[0].isdigit():
            n = int(cl[0])
            res.body = data[pos:pos + n]
            res.complete = len(data) >= pos + n
            pos = min(len(data), pos + n)
        else:
            res.body = data[pos:]
            res.complete = closed
            pos = len(data)
        finals.append(res)
        if not res.complete:
            break
    if not finals and not interim and data and not data.startswith(b"HTTP/"):
        # An HTTP/0.9 answer (the body alone, ended by the close): status 0.
        finals.append(Response(0, [], data, closed))
    return finals, interim


_STATUS_LINE = re.compile(rb"^HTTP/1\.[01] [1-9][0-9]{2} [\t\x20-\x7e\x80-\xff]*$")


def response_ambiguities(data: bytes) -> list[str]:
    """What is ambiguous in the response heads a client received."""
    out: list[str] = []
    finals, interim = read_responses(data, ["GET"] * 8, True)
    for res in interim + finals:
        if not res.head:
            continue
        head = res.head[:-2]
        out += _line_endings(head)
        lines = head[:-2].split(b"\r\n")
        if not _STATUS_LINE.match(lines[0]):
            out.append(f"non-canonical status line {lines[0][:60]!r}")
        for line in lines[1:]:
            out += _field_problems(line, "header")
        te, cl = res.header(b"transfer-encoding"), res.header(b"content-length")
        if te and cl:
            out.append("Content-Length with Transfer-Encoding")
        if len(cl) > 1:
            out.append("two Content-Lengths")
        if cl and not re.match(rb"^[0-9]+$", cl[0]):
            out.append(f"bad Content-Length {cl[0][:30]!r}")
    if data and not data.startswith(b"HTTP/"):
        out.append(f"not an HTTP/1.x response: {data[:40]!r}")
    return out
