#!/usr/bin/env python3
"""Where an admitted standard request's time goes under overload, from Sluice's access logs.

Reads runs/<shape>-sluice-<load>-access.log in a KEEP_TMP=1 temp dir of
bench/overload/run.sh and prints, per run in the measured window (the first WARMUP seconds
of requests dropped):
- the standard requests admitted, the share that waited for a slot, their queue_ms p50 / p99,
  and the share that waited more than a quarter of the service time (the part of 1.25 S
  left to a wait);
- the releases of the upstream's slots (each admitted bulk or standard request's start +
  duration_ms; a stream's slot turns over once in two seconds): the gaps between
  consecutive releases, p50 / p90 / p99 / max, and the share of the time that lies in a
  gap longer than a quarter of the service time (a request that finds every slot held and
  arrives in such a gap waits that long for a release, whatever the order of the queue).

The access log's ts has millisecond precision: gaps are exact to about a millisecond.
"""
import argparse
import datetime
import glob
import json
import os
import re

from analyze import quantile  # the same percentile as the bench's tables


def parse_ts(ts):
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def run(path, warmup, service_ms):
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    if not rows:
        return None
    t0 = min(parse_ts(r["ts"]) for r in rows)
    quarter = service_ms / 4
    waits, releases = [], []
    for r in rows:
        start = parse_ts(r["ts"]) - t0
        if start < warmup or r.get("decision") != "admitted" or r.get("status") != 200:
            continue
        if r["lane"] != "heavy":
            releases.append(start * 1e3 + r["duration_ms"])
        if r["lane"] == "standard":
            waits.append(r["queue_ms"])
    releases.sort()
    gaps = [b - a for a, b in zip(releases, releases[1:])]
    span = releases[-1] - releases[0] if len(releases) > 1 else float("nan")
    return {
        "standard": len(waits),
        "waited": sum(1 for w in waits if w > 0) / max(1, len(waits)),
        "queue_p50": quantile(waits, 0.5),
        "queue_p99": quantile(waits, 0.99),
        "over_quarter": sum(1 for w in waits if w > quarter) / max(1, len(waits)),
        "gap_p50": quantile(gaps, 0.5),
        "gap_p90": quantile(gaps, 0.9),
        "gap_p99": quantile(gaps, 0.99),
        "gap_max": max(gaps) if gaps else float("nan"),
        "in_long_gaps": sum(g for g in gaps if g > quarter) / span,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="the temp dir of a KEEP_TMP=1 run")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--service-ms", type=float, default=50.0)
    ap.add_argument("--loads", default="2 3")
    a = ap.parse_args()
    print("| upstream | load | standard admitted | waited for a slot | queue_ms p50 / p99 "
          "| waited > S/4 | release gap p50 / p90 / p99 / max ms | time in gaps > S/4 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for path in sorted(glob.glob(os.path.join(a.dir, "runs", "*-sluice-*-access.log"))):
        m = re.match(r"(\w+)-sluice-([\d.p]+)-access\.log$", os.path.basename(path))
        if not m or m.group(2) not in a.loads.split():
            continue
        r = run(path, a.warmup, a.service_ms)
        if not r:
            continue
        print(f"| {m.group(1)} | {m.group(2)}x | {r['standard']} | {100 * r['waited']:.1f} % "
              f"| {r['queue_p50']:.1f} / {r['queue_p99']:.1f} | {100 * r['over_quarter']:.1f} % "
              f"| {r['gap_p50']:.1f} / {r['gap_p90']:.1f} / {r['gap_p99']:.1f} / {r['gap_max']:.1f} "
              f"| {100 * r['in_long_gaps']:.1f} % |")


if __name__ == "__main__":
    main()
