#!/usr/bin/env python3
"""Open N kept-alive HTTP/1.1 client connections to one address and hold them idle.

Each connection is opened with a non-blocking connect (in batches), sends one
`GET / HTTP/1.1` request, reads the whole response (Content-Length framed), and
then stays open without sending anything else. When all batches are done the
script writes the number of live connections to --ready-file, waits until
--done-file appears (or --hold seconds pass), checks that the connections are
still open (none has been closed by the server), prints a summary line and
exits, closing them all.

Used by bench/proxy_compare.sh --idle-connections; standard library only.
"""

import argparse
import errno
import os
import resource
import selectors
import socket
import sys
import time


def raise_nofile(needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return soft
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


class Conn:
    __slots__ = ("sock", "buf", "state")

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.state = "connecting"


def response_complete(buf):
    """True when buf holds a full response head and its Content-Length body."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return False
    head = buf[:end].decode("latin-1")
    lines = head.split("\r\n")
    if not lines[0].startswith("HTTP/1.1 "):
        raise ValueError("bad status line: %r" % lines[0])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
        if name.strip().lower() == "connection" and "close" in value.lower():
            raise ValueError("server asked to close the connection")
    return len(buf) - (end + 4) >= length


def run_batch(host, port, count, request, timeout):
    sel = selectors.DefaultSelector()
    conns = []
    failed = 0
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        rc = s.connect_ex((host, port))
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            failed += 1
            continue
        c = Conn(s)
        conns.append(c)
        sel.register(s, selectors.EVENT_WRITE, c)
    pending = len(conns)
    done = []
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            c = key.data
            try:
                if c.state == "connecting":
                    err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        raise OSError(err, os.strerror(err))
                    c.sock.sendall(request)  # tiny; fits the send buffer
                    c.state = "reading"
                    sel.modify(c.sock, selectors.EVENT_READ, c)
                else:
                    data = c.sock.recv(65536)
                    if not data:
                        raise OSError("closed before the response was complete")
                    c.buf += data
                    if response_complete(c.buf):
                        c.state = "idle"
                        c.buf = b""
                        sel.unregister(c.sock)
                        done.append(c)
                        pending -= 1
            except (OSError, ValueError) as e:
                print("idle_clients: connection failed: %s" % e, file=sys.stderr)
                sel.unregister(c.sock)
                c.sock.close()
                c.state = "failed"
                failed += 1
                pending -= 1
    for c in conns:
        if c.state in ("connecting", "reading"):
            sel.unregister(c.sock)
            c.sock.close()
            failed += 1
    sel.close()
    return done, failed


def still_open(conns):
    """Count connections the server has not closed (not readable, or readable with no EOF)."""
    sel = selectors.DefaultSelector()
    for c in conns:
        sel.register(c.sock, selectors.EVENT_READ, c)
    closed = 0
    for key, _ in sel.select(timeout=0.2):
        try:
            data = key.data.sock.recv(1, socket.MSG_PEEK)
            if not data:
                closed += 1
        except OSError:
            closed += 1
    sel.close()
    return len(conns) - closed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--batch-timeout", type=float, default=30.0)
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--done-file", required=True)
    ap.add_argument("--hold", type=float, default=600.0, help="longest wait for --done-file, seconds")
    args = ap.parse_args()

    limit = raise_nofile(args.count + 64)
    if limit < args.count + 16:
        print("idle_clients: RLIMIT_NOFILE is %d, too low for %d connections" % (limit, args.count),
              file=sys.stderr)
        return 2

    request = ("GET / HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: sluice-bench-idle\r\n\r\n"
               % (args.host, args.port)).encode()
    conns = []
    failed = 0
    started = time.monotonic()
    while len(conns) + failed < args.count:
        n = min(args.batch, args.count - len(conns) - failed)
        done, bad = run_batch(args.host, args.port, n, request, args.batch_timeout)
        conns.extend(done)
        failed += bad
    elapsed = time.monotonic() - started
    print("idle_clients: %d connections open and idle, %d failed, %.1fs"
          % (len(conns), failed, elapsed), file=sys.stderr)
    with open(args.ready_file + ".tmp", "w") as f:
        f.write("%d %d\n" % (len(conns), failed))
    os.rename(args.ready_file + ".tmp", args.ready_file)

    deadline = time.monotonic() + args.hold
    while not os.path.exists(args.done_file) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = still_open(conns)
    print("idle_clients: %d of %d connections still open at the end" % (alive, len(conns)),
          file=sys.stderr)
    print("%d %d %d" % (len(conns), failed, alive))
    for c in conns:
        c.sock.close()
    return 0 if failed == 0 and alive == len(conns) else 1


if __name__ == "__main__":
    sys.exit(main())
