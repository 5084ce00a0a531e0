#!/usr/bin/env python3
"""Closed-loop clients of one tenant for bench/tenants.sh.

Each client sends GET PATH with `X-Api-Key: KEY` back to back on a keep-alive
connection to one of the TARGETS (client i to target i mod n), pausing
--pause-ms after a refusal (429, 503) so refused clients do not spin. Prints
one JSON object: counts by outcome, latency percentiles of the 200s (ms; the
p99 of the whole run and of the requests sent after its first second) and the
200s per whole second from the start.
"""
import argparse
import http.client
import json
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", required=True, help="host:port[,host:port...]")
    ap.add_argument("--key", required=True)
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--path", default="/")
    ap.add_argument("--pause-ms", type=float, default=20)
    a = ap.parse_args()
    targets = [t.rsplit(":", 1) for t in a.targets.split(",")]
    lock = threading.Lock()
    counts = {"ok": 0, "limited_429": 0, "refused_503": 0, "other": 0, "failed": 0}
    latencies = []
    steady = []  # after the first second (the cold start's slow start and first refusals)
    per_second = {}
    start = time.monotonic()

    def client(i):
        host, port = targets[i % len(targets)]
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        while True:
            t0 = time.monotonic()
            if t0 - start >= a.seconds:
                return
            try:
                conn.request("GET", a.path, headers={"X-Api-Key": a.key})
                resp = conn.getresponse()
                resp.read()
                status = resp.status
            except (OSError, http.client.HTTPException):
                status = None
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=10)
            t1 = time.monotonic()
            with lock:
                if status == 200:
                    counts["ok"] += 1
                    latencies.append((t1 - t0) * 1000)
                    if t0 - start >= 1.0:
                        steady.append((t1 - t0) * 1000)
                    s = int(t1 - start)
                    per_second[s] = per_second.get(s, 0) + 1
                elif status == 429:
                    counts["limited_429"] += 1
                elif status == 503:
                    counts["refused_503"] += 1
                elif status is None:
                    counts["failed"] += 1
                else:
                    counts["other"] += 1
            if status in (429, 503):
                time.sleep(a.pause_ms / 1000)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies.sort()
    steady.sort()

    def pct(p, v=None):
        v = latencies if v is None else v
        return round(v[min(len(v) - 1, int(p * len(v)))], 1) if v else None

    answered = sum(v for k, v in counts.items() if k != "failed")
    out = dict(counts)
    out.update({
        "answered": answered,
        "success": round(counts["ok"] / answered, 4) if answered else None,
        "p50_ms": pct(0.50), "p99_ms": pct(0.99), "p99_after_1s_ms": pct(0.99, steady),
        "per_second": [per_second.get(s, 0) for s in range(int(a.seconds))],
    })
    print(json.dumps(out))


if __name__ == "__main__":
    main()
