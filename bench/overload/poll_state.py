#!/usr/bin/env python3
"""Polls Sluice's GET /admin/state every PERIOD seconds and writes one TSV line per poll:
seconds since --t0 (a Unix time, the load's start), the process's admission level, K-hat and K
of the first upstream, its running and waiting requests, each lane's queue depth, and the first
upstream's own level (a request meets the higher of the two).
Runs until killed (SIGTERM) or --seconds have passed."""
import argparse
import json
import signal
import sys
import time
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--t0", type=float, required=True)
    ap.add_argument("--period", type=float, default=0.1)
    ap.add_argument("--seconds", type=float, default=600)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(args.out, "w", buffering=1) as out:
        out.write("t_s\tlevel\tkhat\tk\trunning\twaiting\twaiting_bulk\twaiting_standard\twaiting_heavy"
                  "\tupstream_level\n")
        next_at = time.time()
        end = next_at + args.seconds
        while time.time() < end:
            try:
                with urllib.request.urlopen(args.url, timeout=1) as r:
                    s = json.load(r)
                up = s["upstreams"][0]
                lanes = s["lanes"]
                out.write("%.3f\t%d\t%.2f\t%.2f\t%d\t%d\t%d\t%d\t%d\t%d\n" % (
                    time.time() - args.t0, s["level"], up["capacity"], up["carrying_capacity"],
                    up["running"], up["waiting"], lanes["bulk"]["waiting"],
                    lanes["standard"]["waiting"], lanes["heavy"]["waiting"], up.get("level", -1)))
            except (OSError, ValueError, KeyError):
                pass
            next_at += args.period
            time.sleep(max(0.0, next_at - time.time()))


if __name__ == "__main__":
    main()
