#!/usr/bin/env python3
"""The soak's client side: mixed load against Sluice, with faults, counting every answer.

For --duration seconds it sends about --rate requests a second over kept-alive
connections (worker threads, each with its own connection), holds --sse
SSE streams open at all times, toggles pins through the admin API every
--pin-every seconds and, with --fault-cmd, kills one upstream host (SIGKILL, by
its pid) every --fault-every seconds and starts it again on the same port
--fault-down seconds later.

Every request ends in exactly one of:
  answered   a complete response (by status code),
  cut        a response head arrived and then the body was cut (Sluice says so
             by closing the connection; its metrics count it as 502),
  timed_out  no answer within --timeout (the client gives up; Sluice counts 499),
  no_answer  the connection closed before any response byte, with the reason.
The summary (one JSON line on stdout) has sent and each of these; sent must
equal their sum, and the caller compares the codes with Sluice's /metrics.

Standard library only. Used by bench/soak.sh.
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

MIX = [
    # weight, lane, method, path, body bytes
    (40, "standard", "GET", "/", 0),
    (8, "standard", "POST", "/echo", 2048),
    (12, "bulk", "GET", "/large?bytes=65536", 0),
    (4, "bulk", "POST", "/echo", 65536),
    (3, "standard", "GET", "/large?bytes=262144&chunked=1", 0),
    (3, "standard", "GET", "/status/500", 0),
    (1, "standard", "GET", "/status/503", 0),
    (2, "standard", "GET", "/drop", 0),
    (1, "standard", "POST", "/drop", 64),
    (1, "standard", "GET", "/slow?ms=500", 0),
    (1, "standard", "GET", "/raw?kind=short_length", 0),
]


def log(msg):
    print("soak_client: " + msg, file=sys.stderr, flush=True)


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.sent = 0
        self.codes = Counter()       # complete answers, by status code
        self.cut = Counter()         # head arrived, body cut: by status of the head
        self.timed_out = Counter()   # by what the client was doing
        self.no_answer = Counter()   # by reason
        self.lanes = Counter()
        self.sse = Counter()

    def add(self, field, key, lane=None):
        with self.lock:
            getattr(self, field)[key] += 1
            if lane:
                self.lanes[lane] += 1

    def count_sent(self):
        with self.lock:
            self.sent += 1


class Closed(Exception):
    """The peer closed (or reset) the connection."""


class Conn:
    """One kept-alive HTTP/1.1 client connection over a plain socket.

    The request is sent whole; if the send fails (Sluice may answer and close
    before it has read a body it refuses), the answer is still read. The
    response is framed by Content-Length, chunked coding or the close.
    """

    def __init__(self, port, timeout):
        self.port = port
        self.timeout = timeout
        self.sock = None
        self.buf = b""

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.sock = None
        self.buf = b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise Closed()
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        self.buf = self.buf[n:]

    def exchange(self, raw):
        """Returns (status, outcome, reason): outcome is answered, cut, timed_out or no_answer."""
        if self.sock is None:
            try:
                self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
            except OSError as e:
                return None, "no_answer", "connect_" + type(e).__name__
        self.sock.settimeout(self.timeout)
        send_error = None
        try:
            self.sock.sendall(raw)
        except OSError as e:
            send_error = e
        status = None
        try:
            while b"\r\n\r\n" not in self.buf:
                self._fill()
            head, _, self.buf = self.buf.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            status = int(lines[0].split()[1])
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(b":")
                headers[k.strip().lower()] = v.strip().lower()
            close = headers.get(b"connection") == b"close" or lines[0].startswith(b"HTTP/1.0")
            if headers.get(b"transfer-encoding") == b"chunked":
                while True:
                    size = int(self._line().split(b";")[0], 16)
                    if size == 0:
                        while self._line():
                            pass
                        break
                    self._take(size + 2)
            elif b"content-length" in headers:
                self._take(int(headers[b"content-length"]))
            else:
                close = True
                try:
                    while True:
                        self._fill()
                except Closed:
                    pass
            if close:
                self.close()
            return status, "answered", ""
        except socket.timeout:
            self.close()
            return status, "timed_out", "head" if status is None else "body"
        except (Closed, OSError) as e:
            self.close()
            if status is None:
                why = type(send_error or e).__name__
                return None, "no_answer", why
            return status, "cut", type(e).__name__


def one_request(conn, tally, method, path, body, headers, lane):
    """Sends one request and records its one outcome."""
    tally.count_sent()
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: soak"]
    lines += ["%s: %s" % kv for kv in headers.items()]
    if body is not None:
        lines.append("Content-Length: %d" % len(body))
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")
    status, outcome, reason = conn.exchange(raw)
    if outcome == "answered":
        tally.add("codes", str(status), lane)
    elif outcome == "cut":
        tally.add("cut", str(status), lane)
    elif outcome == "timed_out":
        tally.add("timed_out", reason, lane)
    else:
        tally.add("no_answer", reason, lane)
    return status if outcome == "answered" else None


def worker(args, tally, slots, stop, rng):
    conn = Conn(args.port, args.timeout)
    weights = [m[0] for m in MIX]
    while True:
        item = slots.get()
        if item is None:
            break
        _, lane, method, path, size = rng.choices(MIX, weights)[0]
        headers = {"X-Lane": lane} if lane == "bulk" else {}
        body = os.urandom(size // 2).hex().encode() if size else None
        one_request(conn, tally, method, path, body, headers, lane)
    conn.close()


def sse_loop(args, tally, stop, rng):
    conn = Conn(args.port, args.timeout)
    while not stop.is_set():
        n = rng.randint(5, 20)
        status = one_request(conn, tally, "GET", "/sse?n=%d&interval_ms=250" % n, None,
                             {"Accept": "text/event-stream"}, "heavy")
        tally.add("sse", "ok" if status == 200 else "other")
        if status is None or status != 200:
            time.sleep(0.2)  # a refused or cut stream: do not spin
    conn.close()


def admin_call(args, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", args.admin_port, timeout=10)
    try:
        headers = {"Authorization": "Bearer " + args.token, "Content-Type": "application/json"}
        c.request(method, path, body=body, headers=headers)
        res = c.getresponse()
        res.read()
        return res.status
    finally:
        c.close()


def pin_loop(args, tally, stop, rng):
    pinned = False
    while not stop.wait(args.pin_every):
        try:
            if pinned:
                status = admin_call(args, "DELETE", "/admin/pins")
            else:
                level = rng.choice([1, 1, 2, 3])
                body = json.dumps({"level": level, "ttl": "%ds" % max(1, int(args.pin_every * 0.8)),
                                   "reason": "soak", "who": "soak"})
                status = admin_call(args, "POST", "/admin/pins", body)
            tally.add("sse", "admin_%s_%d" % ("unpin" if pinned else "pin", status))
            pinned = not pinned
        except OSError as e:
            tally.add("sse", "admin_error_" + type(e).__name__)


def fault_loop(args, stop, state):
    """Kills the fault host by its pid and starts it again, over and over."""
    while not stop.wait(args.fault_every):
        proc = state["proc"]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state["kills"] += 1
        if stop.wait(args.fault_down):
            break
        state["proc"] = start_fault(args)


def start_fault(args):
    out = open(args.fault_log, "ab")
    proc = subprocess.Popen(args.fault_cmd.split(), stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    out.close()
    return proc


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--admin-port", type=int, required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--workers", type=int, default=48)
    p.add_argument("--sse", type=int, default=8)
    p.add_argument("--timeout", type=float, default=30)
    p.add_argument("--pin-every", type=float, default=20)
    p.add_argument("--fault-cmd", default="")
    p.add_argument("--fault-log", default="/dev/null")
    p.add_argument("--fault-every", type=float, default=60)
    p.add_argument("--fault-down", type=float, default=5)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    import queue
    tally = Tally()
    stop = threading.Event()
    slots = queue.Queue(maxsize=args.workers * 4)
    threads = []
    for i in range(args.workers):
        t = threading.Thread(target=worker, args=(args, tally, slots, stop, random.Random(args.seed + i)))
        t.start()
        threads.append(t)
    for i in range(args.sse):
        t = threading.Thread(target=sse_loop, args=(args, tally, stop, random.Random(args.seed + 1000 + i)))
        t.start()
        threads.append(t)
    side = []
    if args.pin_every > 0:
        side.append(threading.Thread(target=pin_loop, args=(args, tally, stop, random.Random(args.seed))))
    fault = {"kills": 0, "proc": None}
    if args.fault_cmd:
        fault["proc"] = start_fault(args)
        side.append(threading.Thread(target=fault_loop, args=(args, stop, fault)))
    for t in side:
        t.start()

    # Paced: request k leaves at start + k / rate; a late worker pool delays, never drops.
    start = time.monotonic()
    k = 0
    dropped_pace = 0
    last_report = start
    while True:
        now = time.monotonic()
        if now - start >= args.duration:
            break
        due = start + k / args.rate
        if due > now:
            time.sleep(min(due - now, 0.05))
            continue
        slots.put(k)
        k += 1
        if now - last_report >= 60:
            last_report = now
            with tally.lock:
                log("%.0fs: sent %d, answered %d, cut %d, timed out %d, no answer %d" % (
                    now - start, tally.sent, sum(tally.codes.values()), sum(tally.cut.values()),
                    sum(tally.timed_out.values()), sum(tally.no_answer.values())))
    stop.set()
    for _ in range(args.workers):
        slots.put(None)
    for t in threads + side:
        t.join()
    if fault["proc"] is not None:
        if fault["proc"].poll() is None:
            fault["proc"].terminate()
            try:
                fault["proc"].wait(5)
            except subprocess.TimeoutExpired:
                fault["proc"].kill()
                fault["proc"].wait()
    elapsed = time.monotonic() - start
    answered = sum(tally.codes.values())
    summary = {
        "elapsed_s": round(elapsed, 1),
        "sent": tally.sent,
        "answered": answered,
        "cut": sum(tally.cut.values()),
        "timed_out": sum(tally.timed_out.values()),
        "no_answer": sum(tally.no_answer.values()),
        "codes": dict(sorted(tally.codes.items())),
        "cut_by_head_status": dict(tally.cut),
        "timed_out_in": dict(tally.timed_out),
        "no_answer_reasons": dict(tally.no_answer),
        "lanes": dict(tally.lanes),
        "sse_and_admin": dict(tally.sse),
        "upstream_kills": fault["kills"],
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
