#!/usr/bin/env python3
"""Hold N slow client connections open against one HTTP/1.1 address, a mix of three kinds:

  slowloris   sends a request head a header line every --drip seconds, never ending it;
  slow_body   sends a complete head with Content-Length: --body-bytes, then one body byte
              every --drip seconds;
  slow_read   sends GET --read-target with a 4 KiB receive buffer and reads nothing; after
              --read-hold seconds (+-25 %, so they do not all come back at once) it resets
              the connection (the server has cut it by then, or it holds an upstream
              response that long).

Connections open --batch per 100 ms (200 a second by default), not all at once.

A connection the server closes (or answers: a 408 ends it too) is counted by kind and
how it ended, and replaced at once by a new one of its kind, so N stay open as far as
the client can tell. The counts go to stdout as one JSON line at the end, which comes
after --duration seconds or when --done-file appears. --ready-file is written once all N
have connected the first time.

Used by bench/slow_clients.sh; standard library only.
"""

import argparse
import errno
import json
import os
import random
import resource
import selectors
import socket
import sys
import time

KINDS = ("slowloris", "slow_body", "slow_read")


class Slow:
    __slots__ = ("kind", "sock", "state", "next_at", "born", "got", "hold")

    def __init__(self, kind):
        self.kind = kind
        self.sock = None
        self.state = "idle"
        self.next_at = 0.0
        self.born = 0.0
        self.got = b""
        self.hold = 0.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--mix", default="1,1,1", help="weights of slowloris,slow_body,slow_read")
    p.add_argument("--drip", type=float, default=1.0)
    p.add_argument("--body-bytes", type=int, default=1 << 20)
    p.add_argument("--read-target", default="/large?bytes=1048576")
    p.add_argument("--read-hold", type=float, default=40.0)
    p.add_argument("--duration", type=float, default=3600)
    p.add_argument("--ready-file", default="")
    p.add_argument("--done-file", default="")
    p.add_argument("--batch", type=int, default=20, help="connects started per 100 ms")
    args = p.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.count + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else min(need, hard), hard))

    weights = [float(w) for w in args.mix.split(",")]
    total = sum(weights)
    conns = []
    for i, w in enumerate(weights):
        conns += [Slow(KINDS[i]) for _ in range(round(args.count * w / total))]
    while len(conns) < args.count:
        conns.append(Slow(KINDS[0]))
    conns = conns[: args.count]
    random.Random(7).shuffle(conns)

    sel = selectors.DefaultSelector()
    counts = {k: {"connects": 0, "answered_408": 0, "answered_other": 0, "closed": 0,
                  "connect_failed": 0, "held_to_reset": 0} for k in KINDS}
    addr = ("127.0.0.1", args.port)
    start = time.monotonic()
    ready_written = False
    pending = list(conns)  # not yet connected (or to reconnect)
    rng = random.Random(11)

    def open_conn(c, now):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if c.kind == "slow_read":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        try:
            s.connect(addr)
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            counts[c.kind]["connect_failed"] += 1
            c.next_at = now + 0.5
            pending.append(c)
            return
        c.sock = s
        c.state = "connecting"
        c.born = now
        c.got = b""
        c.hold = args.read_hold * rng.uniform(0.75, 1.25)  # not all in step
        sel.register(s, selectors.EVENT_WRITE, c)

    def finish(c, how, now, reset=False):
        counts[c.kind][how] += 1
        try:
            sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        if reset:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        c.sock.close()
        c.sock = None
        c.state = "idle"
        c.next_at = now + rng.uniform(0.05, 0.3)  # a new one of its kind, soon
        pending.append(c)

    def send(c, data, now):
        try:
            c.sock.send(data)
            return True
        except (BlockingIOError, InterruptedError):
            return True  # a full send buffer: the drip waits a turn
        except OSError:
            finish(c, "closed", now)
            return False

    while True:
        now = time.monotonic()
        if now - start >= args.duration or (args.done_file and os.path.exists(args.done_file)):
            break
        # (re)connect what is due, a batch per turn
        started = 0
        keep = []
        for c in pending:
            if started < args.batch and c.next_at <= now:
                open_conn(c, now)
                started += 1
            else:
                keep.append(c)
        pending[:] = [c for c in keep if c.sock is None]
        for key, mask in sel.select(timeout=0.1):
            c = key.data
            if c.state == "connecting":
                err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    counts[c.kind]["connect_failed"] += 1
                    finish(c, "closed", now)
                    counts[c.kind]["closed"] -= 1
                    continue
                counts[c.kind]["connects"] += 1
                c.state = "open"
                sel.modify(c.sock, selectors.EVENT_READ, c)
                if c.kind == "slowloris":
                    head = b"GET /?slowloris HTTP/1.1\r\nHost: bench\r\n"
                elif c.kind == "slow_body":
                    head = (b"POST /echo HTTP/1.1\r\nHost: bench\r\nContent-Type: text/plain\r\n"
                            b"Content-Length: %d\r\n\r\n" % args.body_bytes)
                else:
                    head = b"GET %s HTTP/1.1\r\nHost: bench\r\n\r\n" % args.read_target.encode()
                    sel.unregister(c.sock)  # it never reads: do not wake up for its data
                send(c, head, now)
                c.next_at = now + args.drip * rng.uniform(0.5, 1.5)
            elif c.kind != "slow_read":
                try:
                    data = c.sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if data:
                    c.got += data
                    if len(c.got) < 12:
                        continue
                    finish(c, "answered_408" if c.got.startswith(b"HTTP/1.1 408") else "answered_other", now)
                else:
                    finish(c, "closed", now)
        # drips and the slow readers' end
        now = time.monotonic()
        for c in conns:
            if c.sock is None or c.state != "open":
                continue
            if c.kind == "slow_read":
                if now - c.born >= c.hold:
                    finish(c, "held_to_reset", now, reset=True)
            elif now >= c.next_at:
                c.next_at = now + args.drip
                send(c, b"X-Drip: 1\r\n" if c.kind == "slowloris" else b"b", now)
        if not ready_written and args.ready_file and sum(v["connects"] for v in counts.values()) >= args.count:
            with open(args.ready_file, "w") as f:
                f.write("%d\n" % sum(1 for c in conns if c.sock is not None))
            ready_written = True

    open_now = sum(1 for c in conns if c.sock is not None)
    for c in conns:
        if c.sock is not None:
            c.sock.close()
    print(json.dumps({"open_at_end": open_now, "by_kind": counts}), flush=True)


if __name__ == "__main__":
    main()
