#!/usr/bin/env python3
"""Summarize bench/proxy_compare.sh rounds: medians per system, ratios, markdown.

Input: a TSV file with a header line and one row per wrk run:
  threads system round rps p50_ms p99_ms cpu_us_per_req requests non2xx socket_errors other_cpu_pct
(other_cpu_pct: CPU used during the run by processes other than the proxy, the
upstream and wrk, in percent of all CPUs; a gauge of outside noise.)
Output (stdout): a plain-text table per thread count, then a markdown fragment
with the same numbers and the run's metadata (--meta KEY=VALUE, repeatable, in order).
"""

import argparse
import statistics
import sys

NAMES = {
    "sluice": "Sluice (access log on)",
    "sluice-nolog": "Sluice (access log off)",
    "nginx": "nginx",
    "haproxy": "HAProxy",
}
ORDER = ["sluice", "sluice-nolog", "nginx", "haproxy"]
RATIO_ROWS = [("sluice", "nginx"), ("sluice", "haproxy"),
              ("sluice-nolog", "nginx"), ("sluice-nolog", "haproxy")]


def load(path):
    rows = []
    with open(path) as f:
        header = f.readline().split()
        for line in f:
            if not line.strip():
                continue
            rows.append(dict(zip(header, line.split())))
    return rows


def summarize(rows):
    """{threads: {system: summary dict}}"""
    out = {}
    for r in rows:
        out.setdefault(int(r["threads"]), {}).setdefault(r["system"], []).append(r)
    result = {}
    for threads, systems in sorted(out.items()):
        result[threads] = {}
        for system, runs in systems.items():
            rps = [float(x["rps"]) for x in runs]
            cpu = [float(x["cpu_us_per_req"]) for x in runs]
            result[threads][system] = {
                "rounds": len(runs),
                "rps": statistics.median(rps),
                "rps_min": min(rps),
                "rps_max": max(rps),
                "p50": statistics.median(float(x["p50_ms"]) for x in runs),
                "p99": statistics.median(float(x["p99_ms"]) for x in runs),
                "cpu": statistics.median(cpu),
                "cpu_min": min(cpu),
                "cpu_max": max(cpu),
                "requests": sum(int(x["requests"]) for x in runs),
                "non2xx": sum(int(x["non2xx"]) for x in runs),
                "sockerr": sum(int(x["socket_errors"]) for x in runs),
                "other_max": max(float(x.get("other_cpu_pct", 0)) for x in runs),
                "raw": [(int(x["round"]), float(x["rps"]), float(x["cpu_us_per_req"]),
                         float(x.get("other_cpu_pct", 0))) for x in runs],
            }
    return result


def ordered(systems):
    return [s for s in ORDER if s in systems] + sorted(s for s in systems if s not in ORDER)


def ratio(a, b):
    return a / b if b else float("nan")


def table_rows(systems):
    header = ["System", "req/s (median)", "req/s min-max", "p50 ms", "p99 ms",
              "CPU us/req (median)", "CPU us/req min-max", "non-2xx", "socket errors",
              "other CPU % (max)"]
    rows = []
    for s in ordered(systems):
        m = systems[s]
        rows.append([NAMES.get(s, s), "%.0f" % m["rps"], "%.0f-%.0f" % (m["rps_min"], m["rps_max"]),
                     "%.2f" % m["p50"], "%.2f" % m["p99"], "%.1f" % m["cpu"],
                     "%.1f-%.1f" % (m["cpu_min"], m["cpu_max"]), str(m["non2xx"]), str(m["sockerr"]),
                     "%.1f" % m["other_max"]])
    return header, rows


def ratio_rows(systems):
    header = ["Ratio", "req/s", "p50", "p99", "CPU us/req"]
    rows = []
    for a, b in RATIO_ROWS:
        if a not in systems or b not in systems:
            continue
        x, y = systems[a], systems[b]
        rows.append(["%s / %s" % (NAMES[a], NAMES[b]), "%.2f" % ratio(x["rps"], y["rps"]),
                     "%.2f" % ratio(x["p50"], y["p50"]), "%.2f" % ratio(x["p99"], y["p99"]),
                     "%.2f" % ratio(x["cpu"], y["cpu"])])
    return header, rows


def text_table(header, rows):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths))) for r in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--meta", action="append", default=[], help="KEY=VALUE, printed in order")
    ap.add_argument("--noise", type=float, default=10.0,
                    help="other CPU %% above which a run counts as disturbed")
    args = ap.parse_args()
    result = summarize(load(args.results))
    if not result:
        print("summarize: no results", file=sys.stderr)
        return 1

    for threads, systems in result.items():
        print()
        print("== %d thread%s (medians of %d rounds) ==" % (
            threads, "" if threads == 1 else "s", max(m["rounds"] for m in systems.values())))
        print(text_table(*table_rows(systems)))
        print()
        print(text_table(*ratio_rows(systems)))
        print()
        busy = [(s, r) for s in ordered(systems) for r in systems[s]["raw"] if r[3] > args.noise]
        if busy:
            print("NOTE: %d of %d runs shared the machine with other work (other CPU above %g%%);"
                  " req/s and latency of those runs are disturbed, CPU us/req much less so."
                  % (len(busy), sum(len(m["raw"]) for m in systems.values()), args.noise))
        print("per round (round: req/s, CPU us/req, other CPU %):")
        for s in ordered(systems):
            raw = sorted(systems[s]["raw"])
            print("  %-24s %s" % (NAMES.get(s, s), "  ".join("%d: %.0f, %.1f, %.0f%%" % r for r in raw)))

    print()
    print("----- markdown -----")
    print()
    for kv in args.meta:
        key, _, value = kv.partition("=")
        print("- %s: %s" % (key, value))
    for threads, systems in result.items():
        print()
        print("#### %d thread%s (SLUICE_THREADS / worker_processes / nbthread = %d), medians of %d rounds"
              % (threads, "" if threads == 1 else "s", threads,
                 max(m["rounds"] for m in systems.values())))
        print()
        print(md_table(*table_rows(systems)))
        print()
        print(md_table(*ratio_rows(systems)))
    print()
    print("Ratios are Sluice divided by the other proxy: above 1 means more requests per second,")
    print("higher latency, or more CPU per request for Sluice. Other CPU % is the CPU used during a")
    print("run by processes other than the proxy, the upstream and wrk, in percent of all CPUs.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
