#!/usr/bin/env python3
"""Tables, targets and charts of bench/overload/run.sh, from its temp dir.

Inputs (in --dir): results.tsv (one row per shape, system, load and class), steps.tsv and
runs/step-*-log.tsv (+ runs/step-*-sluice-state.tsv), halve.tsv and runs/halve-* (log, stats,
Sluice's state), honesty.tsv and runs/honesty-*.
Prints markdown; with --charts DIR writes the SVGs there through gnuplot.

Definitions:
- goodput: the upstream's slot time the 2xx answered within the client timeout used, per
  second, in requests of S: each bulk or standard request counts one, each stream
  STREAM_SECONDS / S (a 2 s stream held a slot 40 requests long), by arrival in the measured
  window; as a share of C/S and of the measured capacity (the direct run's goodput against
  the 429 upstream at the highest load). A stream served is capacity used for a client's
  work: counted as nothing, a system that refuses the streams would gain the slots they
  held. The requests alone (bulk and standard 2xx per second) are reported beside it.
- refused: 503, 429 and any other non-2xx status except 504 (nginx's 502 when max_conns is
  reached); 504 and client timeouts apart.
- step settle: windows of 1 s starting every 100 ms from the step on. Standard p99 by arrival
  (a timeout counts as infinitely late) must be under 2 S; settled at the end of the last
  window that is not. Goodput (by completion) must be within 10 % of its level over the last
  half of the run; settled at the end of the last window that is not.
- halve: the upstream's capacity is C, C/2 from P to 2P s after its first request, then C
  again. Goodput there is the slot time the 2xx answered in time used (S per bulk or standard
  request, by completion; a stream's STREAM_SECONDS from its head, split across the phases it
  spans) over the slot time available (C_t x the phase's length), so streams count as the work
  they are and a full upstream is 100 %; per phase and overall. K-hat following: the time from
  a change to the first poll from which on every poll until the next change (or the end of the
  load) is within 20 % of the new capacity.
- Retry-After honesty: see honesty().
"""
import argparse
import glob
import json
import math
import os
import statistics
import subprocess
import sys
from collections import defaultdict

SYSTEM_ORDER = ["direct", "sluice", "nginx", "nginx-limit-conn", "nginx-max-conns", "haproxy"]
LANES = ["standard", "bulk", "heavy"]
PEERS = ["nginx-limit-conn", "nginx-max-conns", "haproxy"]  # configured with the true capacity


def read_tsv(path):
    with open(path) as f:
        rows = [l.rstrip("\n").split("\t") for l in f if l.strip()]
    head = rows[0]
    return [dict(zip(head, r)) for r in rows[1:] if len(r) == len(head)]


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def load_value(load):
    return float(load.rstrip("p"))


def pct(a, b):
    return 100.0 * a / b if b else math.nan


def fmt(x, spec="%.1f"):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return spec % x


def quantile(values, q):
    if not values:
        return math.nan
    v = sorted(values)
    rank = max(1, math.ceil(q * len(v)))
    return v[rank - 1]


class Results:
    def __init__(self, rows, rate, duration, stream_requests):
        self.rate = rate
        self.duration = duration
        self.stream_requests = stream_requests  # a stream's slot time, in requests of S
        self.by = {}
        for r in rows:
            self.by[(r["shape"], r["system"], r["load"], r["class"])] = r

    def shapes(self):
        return sorted({k[0] for k in self.by}, key=lambda s: (s != "429", s))

    def systems(self, shape):
        present = {k[1] for k in self.by if k[0] == shape}
        return [s for s in SYSTEM_ORDER if s in present]

    def loads(self, shape, system):
        return sorted({k[2] for k in self.by if k[0] == shape and k[1] == system}, key=load_value)

    def row(self, shape, system, load, cls):
        return self.by.get((shape, system, load, cls))

    def requests(self, shape, system, load):
        """Bulk and standard 2xx answered in time per second."""
        ok = 0
        for cls in ("bulk", "standard"):
            r = self.row(shape, system, load, cls)
            if r is None:
                return math.nan
            ok += num(r["ok"])
        return ok / self.duration

    def goodput(self, shape, system, load):
        """Slot time used by 2xx answered in time, per second, in requests of S."""
        r = self.row(shape, system, load, "heavy")
        streams = num(r["ok"]) if r else 0
        return self.requests(shape, system, load) + streams * self.stream_requests / self.duration

    def lane(self, shape, system, load, cls):
        r = self.row(shape, system, load, cls)
        if r is None:
            return None
        sent = num(r["sent"])
        refused = num(r["503"]) + num(r["429"]) + num(r["other"])
        return {
            "sent": sent,
            "ok": num(r["ok"]),
            "p50": num(r["p50_ms"]),
            "p99": num(r["p99_ms"]),
            "refused": refused,
            "refused_pct": pct(refused, sent),
            "r504_pct": pct(num(r["504"]), sent),
            "timeout_pct": pct(num(r["timeouts"]), sent),
            "timeouts": num(r["timeouts"]),
            "errors": num(r["errors"]) + num(r["dropped"]),
            "ra": num(r["refused_with_retry_after"]),
            "ra_base": num(r["refused"]),
            "up_requests": num(r["up_requests"]),
            "up_rejected": num(r["up_rejected"]),
            "other_cpu": num(r["other_cpu"]),
        }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--capacity", type=int, required=True)
    ap.add_argument("--service-ms", type=float, required=True)
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--step-at", type=float, default=5)
    ap.add_argument("--halve-phase", type=float, default=10)
    ap.add_argument("--stream-seconds", type=float, default=2)
    ap.add_argument("--meta", default="")
    ap.add_argument("--charts")
    a = ap.parse_args()
    S = a.service_ms
    res = Results(read_tsv(os.path.join(a.dir, "results.tsv")), a.rate, a.duration,
                  a.stream_seconds * 1000.0 / S)
    out = []
    p = out.append

    direct = [l for l in res.loads("429", "direct")] if "429" in res.shapes() else []
    capacity = res.goodput("429", "direct", direct[-1]) if direct else math.nan
    p("- " + a.meta.replace("\n", "\n- "))
    other = [num(r["other_cpu"]) for r in res.by.values()]
    if other:
        p("- Other CPU (processes this script did not start) during the measured windows: "
          "median %.1f %%, max %.1f %%" % (statistics.median(other), max(other)))
    if direct:
        p("- Measured capacity: %.1f requests/s of S answered 2xx in time (%.1f %% of C/S = %.0f/s): "
          "the load generator straight at the 429 upstream at %sx, beside the streams (goodput "
          "counts a stream served as its slot time: %g requests of S)" % (
              capacity, pct(capacity, a.rate), a.rate, direct[-1], res.stream_requests))
    p("")

    for shape in res.shapes():
        title = {"429": "answers 429 above C", "queue": "queues above C"}.get(shape, shape)
        p("#### Upstream that %s" % title)
        p("")
        p("| system | load | goodput / C/S | / capacity | requests alone / capacity | "
          "standard p50 / p99 ms | bulk p50 / p99 ms | "
          "standard refused / 504 / timeout % | bulk refused / 504 / timeout % | streams 2xx % | "
          "refusals with Retry-After | upstream 429 % |")
        p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for system in res.systems(shape):
            for load in res.loads(shape, system):
                g = res.goodput(shape, system, load)
                st = res.lane(shape, system, load, "standard")
                bu = res.lane(shape, system, load, "bulk")
                he = res.lane(shape, system, load, "heavy")
                ra_n = sum(x["ra"] for x in (st, bu, he) if x)
                ra_d = sum(x["ra_base"] for x in (st, bu, he) if x)
                p("| %s | %s | %s %% | %s %% | %s %% | %s / %s | %s / %s | %s / %s / %s | %s / %s / %s | %s | %s | %s |" % (
                    system, load.replace("p", " Poisson"), fmt(pct(g, a.rate)), fmt(pct(g, capacity)),
                    fmt(pct(res.requests(shape, system, load), capacity)),
                    fmt(st["p50"]), fmt(st["p99"]), fmt(bu["p50"]), fmt(bu["p99"]),
                    fmt(st["refused_pct"]), fmt(st["r504_pct"]), fmt(st["timeout_pct"]),
                    fmt(bu["refused_pct"]), fmt(bu["r504_pct"]), fmt(bu["timeout_pct"]),
                    fmt(pct(he["ok"], he["sent"]), "%.0f") if he else "-",
                    ("%d / %d" % (ra_n, ra_d)) if ra_d else "no refusals",
                    fmt(pct(st["up_rejected"], st["up_requests"]), "%.2f") if st["up_requests"] else "-"))
        p("")

    halves = halve_analysis(a, p)
    steps = step_analysis(a, res, S, p)
    honest = honesty(a, p)
    targets(a, res, S, capacity, steps, halves, honest, p)
    print("\n".join(out))
    if a.charts:
        charts(a, res, S, steps)


def windows(t_from, t_to, width=1.0, every=0.1):
    w = t_from
    while w + width <= t_to + 1e-9:
        yield w
        w += every


def overlap(lo, hi, a, b):
    return max(0.0, min(hi, b) - max(lo, a))


def following(state, t_change, t_until, target, band=0.2):
    """Seconds from t_change to the first poll in [t_change, t_until) from which on every poll
    of that span has K-hat within band of target; None when the last poll is out of it."""
    polls = [(t, k) for (t, k) in state if t_change <= t < t_until]
    if not polls:
        return None
    settled = None
    for t, k in polls:
        inside = abs(k - target) <= band * target
        if inside and settled is None:
            settled = t
        elif not inside:
            settled = None
    return None if settled is None else max(0.0, settled - t_change)


def halve_analysis(a, p):
    path = os.path.join(a.dir, "halve.tsv")
    if not os.path.exists(path):
        return {}
    entries = read_tsv(path)
    if not entries:
        return {}
    C = a.capacity
    H = max(1, C // 2)
    P = a.halve_phase
    S = a.service_ms / 1000.0
    L = a.stream_seconds
    entries.sort(key=lambda e: (SYSTEM_ORDER.index(e["system"]), load_value(e["load"])))
    p("#### Upstream whose capacity halves (429 above it: C = %d, %d from %g s to %g s after its first "
      "request, then %d again)" % (C, H, P, 2 * P, C))
    p("")
    p("| system | load | goodput / available | 0-%g s | %g-%g s | %g-%g s | bulk and standard 2xx / (C_t/S) | "
      "standard p99 ms | refused / timeout %% | streams 2xx %% | upstream 429 %% | "
      "K̂ within 20 %% of %d after | of %d after | highest level by phase | other CPU %% |" % (
          P, P, 2 * P, 2 * P, 3 * P, H, C))
    p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    out = {}
    for e in entries:
        system, load = e["system"], e["load"]
        base = os.path.join(a.dir, "runs", "halve-%s-%s" % (system, load))
        rows = [r for r in read_tsv(base + "-log.tsv") if r["retry"] == "0"]
        s0, s1 = [json.loads(l) for l in open(base + "-stats.json").read().split("\n") if l.strip()]
        # The upstream's clock started at its first request: where that is on the load's clock.
        sched_ms = s1.get("schedule_ms")
        offset = (num(e["stats_at"]) - num(sched_ms) / 1000.0 - num(e["t0"])) if sched_ms is not None else 0.0
        end = 3 * P
        bounds = [0.0, min(end, max(0.0, offset + P)), min(end, max(0.0, offset + 2 * P)), end]
        caps = [C, H, C]
        shares, used_all, avail_all, reqs_all = [], 0.0, 0.0, 0
        for i in range(3):
            lo, hi = bounds[i], bounds[i + 1]
            reqs = sum(1 for r in rows if r["class"] in ("bulk", "standard") and r["outcome"] == "ok"
                       and lo <= num(r["done_s"]) < hi)
            streams = sum(overlap(lo, hi, num(r["done_s"]), min(end, num(r["done_s"]) + L))
                          for r in rows if r["class"] == "heavy" and r["outcome"] == "ok")
            used = reqs * S + streams
            avail = caps[i] * (hi - lo)
            shares.append(pct(used, avail))
            used_all += used
            avail_all += avail
            reqs_all += reqs
        overall = pct(used_all, avail_all)
        req_share = pct(reqs_all * S, avail_all)
        std = [num(r["latency_ms"]) for r in rows if r["class"] == "standard" and r["outcome"] == "ok"]
        counted = [r for r in rows if r["class"] in ("bulk", "standard")]
        refused = sum(1 for r in counted if r["outcome"] in ("503", "429", "other"))
        timeouts = sum(1 for r in counted if r["outcome"] == "timeout")
        heavy = [r for r in rows if r["class"] == "heavy"]
        up_req = s1.get("requests", 0) - s0.get("requests", 0)
        up_rej = s1.get("rejected", 0) - s0.get("rejected", 0)
        follow = [None, None]
        have_state = False
        levels = "-"
        state_path = base + "-state.tsv"
        if os.path.exists(state_path):
            polls = read_tsv(state_path)
            state = [(num(r["t_s"]), num(r["khat"])) for r in polls]
            have_state = bool(state)
            follow = [following(state, offset + P, offset + 2 * P, H), following(state, offset + 2 * P, end, C)]
            # The level a request meets: the higher of the process's and its upstream's.
            met = [(num(r["t_s"]), max(num(r["level"]), num(r.get("upstream_level", -1)))) for r in polls]
            levels = " / ".join(fmt(max([l for t, l in met if lo <= t < hi], default=math.nan), "%d")
                                for lo, hi in zip(bounds, bounds[1:]))

        def ffmt(x):
            if not have_state:
                return "-"
            return "never" if x is None else "%.1f s" % x

        out[(system, load)] = {"shares": shares, "overall": overall, "follow": follow, "state": have_state,
                               "offset": offset, "timeouts": timeouts}
        p("| %s | %s | %s %% | %s %% | %s %% | %s %% | %s %% | %s | %s / %s | %s | %s | %s | %s | %s | %s |" % (
            system, load.replace("p", " Poisson"), fmt(overall), fmt(shares[0]), fmt(shares[1]), fmt(shares[2]),
            fmt(req_share), fmt(quantile(std, 0.99)), fmt(pct(refused, len(counted))), fmt(pct(timeouts, len(counted))),
            fmt(pct(sum(1 for r in heavy if r["outcome"] == "ok"), len(heavy)), "%.0f") if heavy else "-",
            fmt(pct(up_rej, up_req), "%.2f") if up_req else "-", ffmt(follow[0]), ffmt(follow[1]), levels,
            e["other_cpu"]))
    p("")
    offsets = ", ".join("%s %+.3f s" % (k[0], v["offset"]) for k, v in out.items())
    p("The upstream's clock on the load's (its first request, from /stats `schedule_ms`): %s. Goodput: "
      "the slot time of the 2xx answered in time (S = %g ms per bulk or standard request, %g s per "
      "stream) over the slot time available; the column after the phases counts bulk and standard only." % (
          offsets, a.service_ms, L))
    p("")
    return out


def step_analysis(a, res, S, p):
    path = os.path.join(a.dir, "steps.tsv")
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return {}
    steps = {}
    with open(path) as f:
        entries = [l.rstrip("\n").split("\t") for l in f if l.strip()]
    p("#### Step from 0.5x to 2x at %.0f s" % a.step_at)
    p("")
    p("| system (upstream shape) | standard p99 under 2 S = %.0f ms for good after | goodput settled after | "
      "goodput after the step / C/S | standard p99 after the step | timeouts after the step | other CPU %% |" % (2 * S))
    p("|---|---:|---:|---:|---:|---:|---:|")
    for shape, system, other in entries:
        rows = read_tsv(os.path.join(a.dir, "runs", "step-%s-%s-log.tsv" % (shape, system)))
        rows = [r for r in rows if r["retry"] == "0"]
        end = max(num(r["scheduled_s"]) for r in rows)
        t0 = a.step_at
        std = [(num(r["scheduled_s"]), r["outcome"], num(r["latency_ms"])) for r in rows if r["class"] == "standard"]
        done = [(num(r["done_s"]), r["outcome"]) for r in rows if r["class"] in ("bulk", "standard")]
        series = []
        last_bad_p99 = None
        for w in windows(0.0, end):
            lat = [(l if o == "ok" else math.inf) for (t, o, l) in std if w <= t < w + 1.0 and o in ("ok", "timeout")]
            q = quantile(lat, 0.99)
            good = sum(1 for (t, o) in done if w <= t < w + 1.0 and o == "ok")
            series.append((w, q, good))
            if w >= t0 and lat and q > 2 * S:
                last_bad_p99 = w
        post = [s for s in series if s[0] >= t0]
        tail = [s[2] for s in post if s[0] >= t0 + (end - t0) / 2]
        level = statistics.mean(tail) if tail else math.nan
        last_bad_good = None
        for w, q, g in post:
            if abs(g - level) > 0.1 * level:
                last_bad_good = w
        p99_settle = 0.0 if last_bad_p99 is None else last_bad_p99 + 1.0 - t0
        good_settle = 0.0 if last_bad_good is None else last_bad_good + 1.0 - t0
        after = [(l if o == "ok" else math.inf) for (t, o, l) in std if t >= t0 and o in ("ok", "timeout")]
        timeouts = sum(1 for r in rows if num(r["scheduled_s"]) >= t0 and r["outcome"] == "timeout")
        never = p99_settle > (end - t0) - 1.0
        steps[(shape, system)] = {"series": series, "p99_settle": p99_settle, "good_settle": good_settle,
                                  "never": never, "level": level}
        p("| %s (%s) | %s | %s s | %s %% | %s ms | %d | %s |" % (
            system, shape, ("never (%.1f s run)" % (end - t0)) if never else "%.1f s" % p99_settle,
            "%.1f" % good_settle, fmt(pct(level, a.rate)), fmt(quantile(after, 0.99)), timeouts, other))
    p("")
    return steps


def honesty(a, p):
    files = glob.glob(os.path.join(a.dir, "runs", "honesty-*-retries.tsv"))
    if not files:
        return None
    retries = read_tsv(files[0])
    log = read_tsv(files[0].replace("-retries.tsv", "-log.tsv"))
    gen = open(files[0].replace("-retries.tsv", "-loadgen.tsv")).read()
    beyond = 0
    for line in gen.splitlines():
        if "due beyond the horizon" in line:
            beyond = int(line.split(",")[1].split()[0])
    edges = [0, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256]
    step, bursts, period, stream_s = "2", 1, 60, None
    meta = os.path.join(a.dir, "honesty.tsv")
    if os.path.exists(meta):
        fields = open(meta).read().split()
        if len(fields) >= 3:
            step = fields[2]
        if len(fields) >= 4:
            bursts = int(fields[3])
        if len(fields) >= 5:
            period = int(fields[4])
        if len(fields) >= 6:
            stream_s = fields[5]
    p("#### Retry-After honesty (Sluice; 0.5x, %sx from 5 s to 15 s%s, streams%s too, 0.5x around)" % (
        step, "".join(", again from %d s to %d s" % (5 + period * k, 15 + period * k) for k in range(1, bursts)),
        " of %s s" % stream_s if stream_s else ""))
    p("")
    p("| overload | lane | refusals with Retry-After | median told wait | obeying first retries admitted | "
      "probes (admitted / sent) by wait | shortest wait that worked | median told / shortest |")
    p("|---|---|---:|---:|---:|---|---:|---:|")
    result = {}
    # Overload k's refusals: from its start to the next one's (period s apart).
    for k in range(bursts):
        lo_t, hi_t = (0 if k == 0 else period * k), (period * (k + 1) if k + 1 < bursts else math.inf)
        label = ["first", "second", "third"][k] if k < 3 else str(k + 1)
        for lane in LANES:
            told = [num(r["retry_after"]) for r in log
                    if r["class"] == lane and r["retry"] == "0" and r["outcome"] in ("503", "429")
                    and num(r["retry_after"]) >= 0 and lo_t <= num(r["scheduled_s"]) < hi_t]
            mine = [r for r in retries if r["class"] == lane and lo_t <= num(r["refused_at_s"]) < hi_t]
            obey = [r for r in mine if r["kind"] == "obey"]
            probes = [r for r in mine if r["kind"] == "probe"]
            if not told:
                p("| %s | %s | 0 | - | - | - | - | - |" % (label, lane))
                continue
            bins = []
            for lo, hi in zip(edges, edges[1:]):
                inb = [r for r in probes if lo <= num(r["delay_s"]) < hi]
                if inb:
                    bins.append((lo, hi, len(inb), sum(int(r["admitted"]) for r in inb),
                                 statistics.median(num(r["delay_s"]) for r in inb)))
            # The shortest wait that worked: the median delay of the shortest bin from which on
            # every bin (with at least 5 probes) had at least 90 % of its probes admitted.
            shortest = None
            for i, (lo, hi, n, ok, med) in enumerate(bins):
                if n < 5:
                    continue
                if all(b[3] >= 0.9 * b[2] for b in bins[i:] if b[2] >= 5):
                    shortest = med
                    break
            med_told = statistics.median(told)
            obey_ok = sum(int(r["admitted"]) for r in obey)
            ratio = med_told / shortest if shortest else math.nan
            result[(label, lane)] = {"told": med_told, "obey_n": len(obey), "obey_ok": obey_ok,
                                     "shortest": shortest, "ratio": ratio}
            p("| %s | %s | %d | %.0f s | %s | %s | %s | %s |" % (
                label, lane, len(told), med_told,
                ("%d / %d = %.1f %%" % (obey_ok, len(obey), pct(obey_ok, len(obey)))) if obey else "none sent",
                ", ".join("[%g, %g) s: %d/%d" % (lo, hi, ok, n) for lo, hi, n, ok, _ in bins) or "-",
                ("%.2f s" % shortest) if shortest else "none",
                fmt(ratio, "%.1f")))
    p("")
    if beyond:
        p("%d first retries were due more than the horizon after the arrivals ended and were not "
          "sent (told more than the horizon)." % beyond)
        p("")
    return result


def targets(a, res, S, capacity, steps, halves, honest, p):
    p("#### Targets (Sluice)")
    p("")
    p("| target | upstream | measured | met |")
    p("|---|---|---|---|")

    def row(name, shape, measured, ok):
        p("| %s | %s | %s | %s |" % (name, shape, measured, "yes" if ok else "**no**"))

    for shape in res.shapes():
        loads = res.loads(shape, "sluice")
        for load in [l for l in loads if load_value(l) >= 2]:
            g = res.goodput(shape, "sluice", load)
            row("%sx: goodput >= 97 %% of measured capacity" % load, shape,
                "%.1f %% (%.1f/s of %.1f/s; the requests alone %.1f %%)" % (
                    pct(g, capacity), g, capacity, pct(res.requests(shape, "sluice", load), capacity)),
                pct(g, capacity) >= 97)
            peers = [(pct(res.goodput(shape, x, load), capacity), x) for x in PEERS
                     if res.lane(shape, x, load, "standard")]
            if peers:
                best, who = max(peers)
                row("%sx: goodput no more than 1 point below the best peer" % load, shape,
                    "%.1f %% against %s's %.1f %%" % (pct(g, capacity), who, best),
                    pct(g, capacity) >= best - 1)
            st = res.lane(shape, "sluice", load, "standard")
            row("%sx: p99 of admitted standard <= 1.25 S = %.1f ms" % (load, 1.25 * S), shape,
                "%.1f ms (%.2f S)" % (st["p99"], st["p99"] / S), st["p99"] <= 1.25 * S)
            lanes = [res.lane(shape, "sluice", load, c) for c in LANES]
            t = sum(x["timeouts"] for x in lanes if x)
            row("%sx: no client timeouts" % load, shape, "%d" % t, t == 0)
            ra = sum(x["ra"] for x in lanes if x)
            rb = sum(x["ra_base"] for x in lanes if x)
            other = sum(x["refused"] - x["ra_base"] for x in lanes if x)
            row("%sx: every refusal with a Retry-After" % load, shape,
                "%d of %d%s" % (ra, rb + other, (" (%d other non-2xx)" % other) if other else ""),
                ra == rb + other)
        for load in [l for l in loads if l.endswith("p")]:
            lanes = [res.lane(shape, "sluice", load, c) for c in LANES]
            refused = sum(x["refused"] + x["timeouts"] + num(res.row(shape, "sluice", load, c)["504"])
                          for c, x in zip(LANES, lanes) if x)
            sent = sum(x["sent"] for x in lanes if x)
            row("%sx Poisson: at most 0.5 %% refused" % load.rstrip("p"), shape,
                "%.2f %% (%d of %d)" % (pct(refused, sent), refused, sent), pct(refused, sent) <= 0.5)
            st = res.lane(shape, "sluice", load, "standard")
            row("%sx Poisson: p99 of admitted standard <= 2 S = %.0f ms" % (load.rstrip("p"), 2 * S),
                shape, "%.1f ms" % st["p99"], st["p99"] <= 2 * S)
        if shape == "429":
            for load in [l for l in loads if load_value(l) >= 1]:
                st = res.lane(shape, "sluice", load, "standard")
                share = pct(st["up_rejected"], st["up_requests"])
                row("%sx: the upstream's 429s < 2 %% of what Sluice forwards" % load, shape,
                    "%.2f %% (%d of %d)" % (share, st["up_rejected"], st["up_requests"]), share < 2)
    if honest:
        for (burst, lane), h in honest.items():
            lane = "%s, %s overload" % (lane, burst)
            if h["obey_n"]:
                row("Retry-After honest: >= 95 %% of obeying first retries admitted (%s)" % lane, "queue",
                    "%.1f %% (%d of %d)" % (pct(h["obey_ok"], h["obey_n"]), h["obey_ok"], h["obey_n"]),
                    h["obey_ok"] >= 0.95 * h["obey_n"])
            row("Retry-After honest: median told wait <= 2x the shortest that worked (%s)" % lane, "queue",
                "told %.0f s, shortest %s" % (h["told"], ("%.2f s: %.1fx" % (h["shortest"], h["ratio"]))
                                              if h["shortest"] else "none found"),
                bool(h["shortest"]) and h["ratio"] <= 2)
    for (system, load), h in halves.items():
        if system != "sluice":
            continue
        row("halve %sx: goodput >= 95 %% of the capacity available at each moment" % load, "halve",
            "%s %% (phases %s %%)" % (fmt(h["overall"]), " / ".join(fmt(x) for x in h["shares"])),
            all(x >= 95 for x in h["shares"]))
        f = h["follow"]
        row("halve %sx: K̂ following within 2 s either way" % load, "halve",
            "halved: %s, restored: %s" % tuple("never" if x is None else "%.1f s" % x for x in f)
            if h["state"] else "no /admin/state samples",
            h["state"] and all(x is not None and x <= 2 for x in f))
    for (shape, system), s in steps.items():
        if system != "sluice":
            continue
        row("after the step to 2x, standard p99 under 2 S for good within 3 s", shape,
            "never" if s["never"] else "%.1f s" % s["p99_settle"], not s["never"] and s["p99_settle"] <= 3)
    p("")


GNUPLOT_HEAD = """set terminal svg size 900,520 dynamic enhanced font "sans,12" background "white"
set grid lc rgb "#dddddd"
set key outside right top
"""
COLORS = {"sluice": "#d62728", "nginx": "#7f7f7f", "nginx-limit-conn": "#1f77b4",
          "nginx-max-conns": "#17becf", "haproxy": "#2ca02c", "direct": "#000000"}


def charts(a, res, S, steps):
    d = os.path.join(a.dir, "charts")
    os.makedirs(d, exist_ok=True)
    script = [GNUPLOT_HEAD]
    for shape in res.shapes():
        systems = [s for s in res.systems(shape) if s != "direct"]
        for s in systems:
            with open(os.path.join(d, "%s-%s.dat" % (shape, s)), "w") as f:
                f.write("# load goodput_pct std_p99 bulk_p99\n")
                for load in res.loads(shape, s):
                    g = res.goodput(shape, s, load)
                    st = res.lane(shape, s, load, "standard")
                    bu = res.lane(shape, s, load, "bulk")
                    f.write("%g %g %s %s\n" % (load_value(load), pct(g, a.rate),
                                               "NaN" if math.isnan(st["p99"]) else st["p99"],
                                               "NaN" if math.isnan(bu["p99"]) else bu["p99"]))
        title = {"429": "answers 429 above C", "queue": "queues above C"}[shape]
        script.append('set output "%s/overload-goodput-%s.svg"' % (a.charts, shape))
        script.append('set title "Goodput (slot time of the 2xx within the client timeout) vs offered load: upstream that %s (C=%d, S=%g ms)"'
                      % (title, a.capacity, S))
        script.append('set xlabel "offered load (x C/S)"; set ylabel "goodput (% of C/S)"')
        script.append("set xrange [0.4:3.1]; set yrange [0:110]; unset logscale y")
        script.append("plot " + ", ".join(
            '"%s/%s-%s.dat" using 1:2 with linespoints lw 2 pt 7 lc rgb "%s" title "%s"' % (d, shape, s, COLORS[s], s)
            for s in systems))
        script.append('set output "%s/overload-p99-%s.svg"' % (a.charts, shape))
        script.append("set multiplot layout 1,2 title \"p99 of the 2xx answered in time, by lane: upstream that %s\"" % title)
        script.append('set xlabel "offered load (x C/S)"; set ylabel "p99 (ms)"; set logscale y; set yrange [10:1200]')
        script.append("set key inside left top")
        for i, lane in enumerate(("standard", "bulk")):
            script.append('set title "%s"' % lane)
            col = 3 + i
            script.append("plot " + ", ".join(
                '"%s/%s-%s.dat" using 1:%d with linespoints lw 2 pt 7 lc rgb "%s" title "%s"' % (d, shape, s, col, COLORS[s], s)
                for s in systems) + ', %g with lines dt 2 lc rgb "#999999" title "1.5 S"' % (1.5 * S))
        script.append("unset multiplot; set key outside right top; unset logscale y")
    if steps:
        state_files = glob.glob(os.path.join(a.dir, "runs", "step-*-sluice-state.tsv"))
        for (shape, system), s in steps.items():
            with open(os.path.join(d, "step-%s-%s.dat" % (shape, system)), "w") as f:
                for w, q, g in s["series"]:
                    f.write("%g %s %g\n" % (w + 1.0, "NaN" if math.isnan(q) else min(q, 5000), g))
        shape = next(iter(steps))[0]
        script.append('set output "%s/overload-step.svg"' % a.charts)
        script.append("set terminal svg size 900,900 dynamic enhanced font \"sans,12\" background \"white\"")
        script.append('set multiplot layout 3,1 title "Step from 0.5x to 2x at %g s (upstream that %s above C)"'
                      % (a.step_at, "queues" if shape == "queue" else "answers 429"))
        script.append("set xrange [0:*]; set key outside right top")
        script.append('set title "standard p99 over the last 1 s (by arrival; timeouts as 5 s)"; set ylabel "ms"; set logscale y; set yrange [10:6000]; set xlabel ""')
        script.append("plot " + ", ".join(
            '"%s/step-%s-%s.dat" using 1:2 with lines lw 2 lc rgb "%s" title "%s"' % (d, sh, sy, COLORS[sy], sy)
            for (sh, sy) in steps) + ', %g with lines dt 2 lc rgb "#999999" title "2 S"' % (2 * S))
        script.append('unset logscale y; set title "goodput over the last 1 s"; set ylabel "% of C/S"; set yrange [0:120]')
        script.append("plot " + ", ".join(
            '"%s/step-%s-%s.dat" using 1:($3*100/%g) with lines lw 2 lc rgb "%s" title "%s"' % (d, sh, sy, a.rate, COLORS[sy], sy)
            for (sh, sy) in steps))
        if state_files:
            script.append('set title "Sluice: admission level, K-hat and bulkhead queue depth (/admin/state every 100 ms)"')
            script.append('set xlabel "seconds"; set ylabel "requests"; set yrange [0:*]; set y2range [0:3.5]; set y2tics 0,1,3; set y2label "level"')
            f = state_files[0]
            script.append('plot "%s" using 1:3 every ::1 with lines lw 2 lc rgb "#d62728" title "K-hat", '
                          '"%s" using 1:6 every ::1 with lines lw 1 lc rgb "#1f77b4" title "queue depth", '
                          '"%s" using 1:5 every ::1 with lines lw 1 lc rgb "#2ca02c" title "running", '
                          '"%s" using 1:2 every ::1 axes x1y2 with steps lw 2 lc rgb "#000000" title "level"' % (f, f, f, f))
        script.append("unset multiplot")
    gp = os.path.join(d, "charts.gp")
    with open(gp, "w") as f:
        f.write("\n".join(script) + "\n")
    r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write("overload: gnuplot failed:\n" + r.stderr)
    else:
        sys.stderr.write("overload: charts written to %s\n" % a.charts)


if __name__ == "__main__":
    main()
