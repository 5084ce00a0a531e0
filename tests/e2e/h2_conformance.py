#!/usr/bin/env python3
"""HTTP/2 conformance: a case list of raw frames against a server speaking h2c.

h2spec is not packaged for Debian, so this is Sluice's own list, each case
from RFC 9113 (and RFC 7541 for HPACK), with what the server must answer:
a connection error (GOAWAY with a code, then the end), a stream error
(RST_STREAM with a code, the connection going on), or an answer.

usage: h2_conformance.py HOST PORT
Prints one line per case and "N passed, M failed"; exits 1 on a failure.
"""
import socket
import struct
import sys

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT, STREAM_CLOSED, \
    FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = range(10)


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def literal(name, value):
    """HPACK: a literal field without indexing, new name, no Huffman."""
    def s(b):
        assert len(b) < 127
        return bytes([len(b)]) + b
    return b"\x00" + s(name.encode()) + s(value.encode())


def block(fields):
    return b"".join(literal(n, v) for n, v in fields)


GET = [(":method", "GET"), (":scheme", "http"), (":path", "/echo"), (":authority", "127.0.0.1")]


class Conn:
    def __init__(self, host, port):
        self.s = socket.create_connection((host, port), timeout=5)
        self.buf = b""

    def send(self, b):
        try:
            self.s.sendall(b)
        except OSError:
            pass

    def start(self):
        self.send(PREFACE + frame(SETTINGS, 0, 0))

    def frames(self, until, timeout=5.0):
        """Frames received until `until(frame)` holds or the peer closes; a list of
        (kind, flags, stream, payload), and whether the connection ended."""
        self.s.settimeout(timeout)
        got = []
        while True:
            while len(self.buf) >= 9:
                n = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) < 9 + n:
                    break
                f = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF,
                     self.buf[9:9 + n])
                self.buf = self.buf[9 + n:]
                if f[0] == SETTINGS and not f[1] & ACK:
                    self.send(frame(SETTINGS, ACK, 0))
                got.append(f)
                if until(f):
                    return got, False
            try:
                chunk = self.s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                return got, True
            if not chunk:
                return got, True
            self.buf += chunk


def goaway(code):
    """A connection error: GOAWAY with `code`."""
    def check(c):
        got, _ = c.frames(lambda f: f[0] == GOAWAY)
        g = [f for f in got if f[0] == GOAWAY]
        if not g:
            return "no GOAWAY"
        have = int.from_bytes(g[0][3][4:8], "big")
        return None if have == code else "GOAWAY code %d, want %d" % (have, code)
    return check


def reset(stream, code, then_serves=True):
    """A stream error: RST_STREAM on `stream` with `code`, and the connection
    still answers a request on a later stream; or, stricter, the connection
    error with that code (RFC 9113 5.4.1: a stream error may be treated as one)."""
    def check(c):
        got, ended = c.frames(lambda f: f[0] == RST_STREAM and f[2] == stream or f[0] == GOAWAY)
        r = [f for f in got if f[0] == RST_STREAM and f[2] == stream]
        g = [f for f in got if f[0] == GOAWAY]
        if not r and g:
            have = int.from_bytes(g[0][3][4:8], "big")
            return None if have == code else "GOAWAY code %d, want %d" % (have, code)
        if not r:
            return "no RST_STREAM on stream %d (%s)" % (stream, "closed" if ended else "open")
        have = int.from_bytes(r[0][3][:4], "big")
        if have != code:
            return "RST_STREAM code %d, want %d" % (have, code)
        if then_serves:
            c.send(frame(HEADERS, END_HEADERS | END_STREAM, 101, block(GET)))
            return answered(101)(c)
        return None
    return check


def answered(stream):
    def check(c):
        got, ended = c.frames(
            lambda f: f[2] == stream and f[1] & END_STREAM and f[0] in (DATA, HEADERS)
            or f[0] in (GOAWAY, RST_STREAM))
        if any(f[0] == HEADERS and f[2] == stream for f in got) and \
                any(f[2] == stream and f[1] & END_STREAM for f in got):
            return None
        return "no whole answer on stream %d (%s)" % (stream, [f[0] for f in got])
    return check


def closed():
    def check(c):
        _, ended = c.frames(lambda f: False, timeout=3.0)
        return None if ended else "still open"
    return check


CASES = [
    ("3.4 a valid request is answered",
     [frame(HEADERS, END_HEADERS | END_STREAM, 1, block(GET))], answered(1)),
    ("3.4 a client preface that is not HTTP/2's ends the connection",
     None, closed()),
    ("5.1.1 a stream id that is even from a client: PROTOCOL_ERROR",
     [frame(HEADERS, END_HEADERS | END_STREAM, 2, block(GET))], goaway(PROTOCOL_ERROR)),
    ("5.1.1 a stream id lower than one used before: PROTOCOL_ERROR",
     [frame(HEADERS, END_HEADERS | END_STREAM, 5, block(GET)),
      frame(HEADERS, END_HEADERS | END_STREAM, 3, block(GET))], goaway(PROTOCOL_ERROR),
     "nghttp2 ignores HEADERS on a stream id it cannot tell from a closed one (its "
     "session_on_request_headers_received): the stream is not served, the connection goes on"),
    ("6.1 DATA on stream 0: PROTOCOL_ERROR",
     [frame(DATA, 0, 0, b"x")], goaway(PROTOCOL_ERROR)),
    ("6.1 DATA on an idle stream: PROTOCOL_ERROR",
     [frame(DATA, END_STREAM, 7, b"x")], goaway(PROTOCOL_ERROR)),
    ("6.2 HEADERS on stream 0: PROTOCOL_ERROR",
     [frame(HEADERS, END_HEADERS, 0, block(GET))], goaway(PROTOCOL_ERROR)),
    ("6.3 PRIORITY of the wrong length: FRAME_SIZE_ERROR on the stream",
     [frame(PRIORITY, 0, 9, b"\x00\x00\x00")], reset(9, FRAME_SIZE_ERROR)),
    ("6.3 a stream that depends on itself: PROTOCOL_ERROR on the stream",
     [frame(HEADERS, END_HEADERS | END_STREAM | 0x20, 1,
            b"\x00\x00\x00\x01\x10" + block(GET))], reset(1, PROTOCOL_ERROR)),
    ("6.4 RST_STREAM on an idle stream: PROTOCOL_ERROR",
     [frame(RST_STREAM, 0, 11, b"\x00\x00\x00\x08")], goaway(PROTOCOL_ERROR)),
    ("6.5 SETTINGS with an ACK and a payload: FRAME_SIZE_ERROR",
     [frame(SETTINGS, ACK, 0, b"\x00\x03\x00\x00\x00\x64")], goaway(FRAME_SIZE_ERROR)),
    ("6.5 SETTINGS on a stream: PROTOCOL_ERROR",
     [frame(SETTINGS, 0, 1, b"")], goaway(PROTOCOL_ERROR)),
    ("6.5 SETTINGS of a length not a multiple of 6: FRAME_SIZE_ERROR",
     [frame(SETTINGS, 0, 0, b"\x00\x03\x00\x00\x00")], goaway(FRAME_SIZE_ERROR)),
    ("6.5.2 SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1: FLOW_CONTROL_ERROR",
     [frame(SETTINGS, 0, 0, b"\x00\x04\x80\x00\x00\x00")], goaway(FLOW_CONTROL_ERROR)),
    ("6.5.2 SETTINGS_ENABLE_PUSH other than 0 or 1: PROTOCOL_ERROR",
     [frame(SETTINGS, 0, 0, b"\x00\x02\x00\x00\x00\x02")], goaway(PROTOCOL_ERROR)),
    ("6.5.2 SETTINGS_MAX_FRAME_SIZE under 16384: PROTOCOL_ERROR",
     [frame(SETTINGS, 0, 0, b"\x00\x05\x00\x00\x10\x00")], goaway(PROTOCOL_ERROR)),
    ("6.7 PING of the wrong length: FRAME_SIZE_ERROR",
     [frame(PING, 0, 0, b"1234567")], goaway(FRAME_SIZE_ERROR)),
    ("6.7 PING on a stream: PROTOCOL_ERROR",
     [frame(PING, 0, 1, b"12345678")], goaway(PROTOCOL_ERROR)),
    ("6.8 GOAWAY on a stream: PROTOCOL_ERROR",
     [frame(GOAWAY, 0, 1, b"\x00" * 8)], goaway(PROTOCOL_ERROR)),
    ("6.9 WINDOW_UPDATE of 0 on the connection: PROTOCOL_ERROR",
     [frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x00\x00")], goaway(PROTOCOL_ERROR)),
    ("6.9.1 a connection window over 2^31-1: FLOW_CONTROL_ERROR",
     [frame(WINDOW_UPDATE, 0, 0, b"\x7f\xff\xff\xff")], goaway(FLOW_CONTROL_ERROR)),
    ("6.10 CONTINUATION with no HEADERS before it: PROTOCOL_ERROR",
     [frame(CONTINUATION, END_HEADERS, 1, block(GET))], goaway(PROTOCOL_ERROR)),
    ("6.10 a frame between HEADERS and its CONTINUATION: PROTOCOL_ERROR",
     [frame(HEADERS, END_STREAM, 1, block(GET[:2])), frame(PING, 0, 0, b"12345678")],
     goaway(PROTOCOL_ERROR)),
    ("8.1 a request with DATA after END_STREAM: STREAM_CLOSED",
     [frame(HEADERS, END_HEADERS | END_STREAM, 1, block(GET)), frame(DATA, 0, 1, b"x")],
     goaway(STREAM_CLOSED)),
    ("8.1.1 content-length and DATA that disagree: PROTOCOL_ERROR on the stream",
     [frame(HEADERS, END_HEADERS, 1,
            block([(":method", "POST"), (":scheme", "http"), (":path", "/echo"),
                   (":authority", "127.0.0.1"), ("content-length", "5")])),
      frame(DATA, END_STREAM, 1, b"abc")], reset(1, PROTOCOL_ERROR)),
    ("8.2 an uppercase field name: PROTOCOL_ERROR on the stream",
     [frame(HEADERS, END_HEADERS | END_STREAM, 1, block(GET + [("X-Upper", "1")]))],
     reset(1, PROTOCOL_ERROR)),
    ("8.2.2 a connection-specific field: PROTOCOL_ERROR on the stream",
     [frame(HEADERS, END_HEADERS | END_STREAM, 1, block(GET + [("connection", "keep-alive")]))],
     reset(1, PROTOCOL_ERROR)),
    ("8.2.2 TE other than trailers: PROTOCOL_ERROR on the stream",
     [frame(HEADERS, END_HEADERS | END_STREAM, 1, block(GET + [("te", "gzip")]))],
     reset(1, PROTOCOL_ERROR)),
    ("8.3.1 a request without :method: PROTOCOL_ERROR on the stream",
     [frame(HEADERS, END_HEADERS | END_STREAM, 1, block(GET[1:]))], reset(1, PROTOCOL_ERROR)),
    ("8.3.1 a pseudo-header after a field: PROTOCOL_ERROR on the stream",
     [frame(HEADERS, END_HEADERS | END_STREAM, 1,
            block(GET[:3] + [("x-a", "1"), (":authority", "127.0.0.1")]))],
     reset(1, PROTOCOL_ERROR)),
    ("8.3.1 an unknown pseudo-header: PROTOCOL_ERROR on the stream",
     [frame(HEADERS, END_HEADERS | END_STREAM, 1, block(GET + [(":nope", "1")]))],
     reset(1, PROTOCOL_ERROR)),
    ("8.3.1 an empty :path: PROTOCOL_ERROR on the stream",
     [frame(HEADERS, END_HEADERS | END_STREAM, 1,
            block([(":method", "GET"), (":scheme", "http"), (":path", ""),
                   (":authority", "127.0.0.1")]))], reset(1, PROTOCOL_ERROR)),
    ("RFC 7541 4.2 a dynamic table size update over the limit: COMPRESSION_ERROR",
     [frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x3f\xe1\xff\x03" + block(GET))],
     goaway(COMPRESSION_ERROR)),
]


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    failed = known = 0
    for case in CASES:
        name, send, check = case[:3]
        deviation = case[3] if len(case) > 3 else None
        c = Conn(host, port)
        if send is None:
            c.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + frame(SETTINGS, 0, 0))
        else:
            c.start()
            c.send(b"".join(send))
        why = check(c)
        c.s.close()
        if why is not None and deviation:
            print("known " + name + ": " + why + "; " + deviation)
            known += 1
            continue
        print(("ok    " if why is None else "FAIL  ") + name + ("" if why is None else ": " + why))
        failed += why is not None
    print("%d passed, %d failed, %d known deviations" % (len(CASES) - failed - known, failed, known))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
