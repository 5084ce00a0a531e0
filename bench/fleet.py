#!/usr/bin/env python3
"""The fleet sharing capacity through Redis, through the real binaries.

Called by bench/fleet.sh (which installs what it needs and documents the
knobs). For each fleet size N and upstream capacity C: a redis-server, an
upstream of C slots x SERVICE_MS answering 429 above C (sluice-upstream), a
second upstream, N Sluice instances (2 I/O threads each), and one open-loop
sluice_loadgen per instance at LOAD x C / SERVICE / N requests a second (the
clients spread evenly, as a round-robin balancer spreads them). Once settled,
PHASE seconds are counted at the upstream (its /stats): goodput (answers that
were not 429, a second, against its capacity) and its 429s against what it
was sent. With sharing on, then again with SLUICE_FLEET_CAPACITY=off. With
sharing on, then: Redis frozen (SIGSTOP) for PHASE s, the same figures; Redis
back (SIGCONT), the time until every instance holds the fleet's share again;
one instance killed (SIGKILL), the time until every other sees it gone.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLUICE = f"{REPO}/build/release/app/sluice"
UPSTREAM = f"{REPO}/build/release/upstream/sluice-upstream"
LOADGEN = f"{REPO}/build/release/bench/sluice_loadgen"

INSTANCES = [int(x) for x in os.environ.get("INSTANCES", "3 8").split()]
CAPACITIES = [int(x) for x in os.environ.get("CAPACITIES", "2 32").split()]
SERVICE_MS = int(os.environ.get("SERVICE_MS", "50"))
LOAD = float(os.environ.get("LOAD", "2"))
SETTLE = float(os.environ.get("SETTLE", "3"))
PHASE = float(os.environ.get("PHASE", "5"))
TMP = os.environ["TMP"]

procs = []


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start(name, argv, env=None):
    log = open(f"{TMP}/{name}.log", "w")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    procs.append(p)
    return p


def stop(p, sig=signal.SIGTERM):
    if p.poll() is None:
        p.send_signal(signal.SIGCONT)
        p.send_signal(sig)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
        return json.loads(r.read())


def wait_port(port, seconds=10):
    end = time.time() + seconds
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"fleet: nothing listens on {port}")


def fleet_of(admin):
    f = get(admin, "/admin/state").get("fleet")
    return f["upstreams"]["api"] if f else None


def until(pred, seconds):
    t0 = time.time()
    while time.time() - t0 < seconds:
        try:
            if pred():
                return time.time() - t0
        except OSError:
            pass
        time.sleep(0.02)
    return None


def counted(up_port, seconds):
    a = get(up_port, "/stats")
    t0 = time.time()
    time.sleep(seconds)
    b = get(up_port, "/stats")
    dt = time.time() - t0
    sent = b["requests"] - a["requests"]
    refused = b["rejected"] - a["rejected"]
    return (sent - refused) / dt, refused / max(1, sent)


def run(n, cap, sharing, failures):
    global procs
    procs = []
    ports = free_ports(3 + 2 * n)
    redis_port, api_port, search_port = ports[:3]
    redis = start("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no"])
    start("api", [UPSTREAM, "--listen", f"127.0.0.1:{api_port}", "--capacity", str(cap),
                  "--service-ms", str(SERVICE_MS), "--threads", "2"])
    start("search", [UPSTREAM, "--listen", f"127.0.0.1:{search_port}"])
    for p in (redis_port, api_port, search_port):
        wait_port(p)
    inst = []
    for i in range(n):
        port, admin = ports[3 + 2 * i], ports[4 + 2 * i]
        env = dict(os.environ)
        env.update({
            "SLUICE_UPSTREAMS": f"api=127.0.0.1:{api_port};search=127.0.0.1:{search_port}",
            "SLUICE_ROUTES": '[{"prefix":"/search","upstream":"search"},{"prefix":"/"}]',
            "SLUICE_THREADS": "2",
            "SLUICE_REDIS_URL": f"redis://127.0.0.1:{redis_port}",
            "SLUICE_REDIS_INTERVAL": "100ms",
            "SLUICE_FLEET_CAPACITY": "on" if sharing else "off",
            "SLUICE_ACCESS_LOG": "off",
            "SLUICE_DRAIN_DELAY": "0",
            "SLUICE_DRAIN_TIMEOUT": "2s",
            "SLUICE_LISTEN": f"127.0.0.1:{port}",
            "SLUICE_ADMIN_LISTEN": f"127.0.0.1:{admin}",
        })
        inst.append((start(f"sluice-{n}-{cap}-{i}", [SLUICE], env), port, admin))
    for _, port, admin in inst:
        wait_port(port)
        wait_port(admin)
    if sharing and until(lambda: all((fleet_of(a) or {}).get("members") == n
                                     for _, _, a in inst), 10) is None:
        raise SystemExit("fleet: the instances did not all join")
    capacity = cap * 1000.0 / SERVICE_MS
    rate = LOAD * capacity / n
    total = SETTLE + PHASE + (PHASE + 15 if failures else 0)
    for i, (_, port, _) in enumerate(inst):
        start(f"load-{n}-{cap}-{i}", [LOADGEN, "--target", f"127.0.0.1:{port}", "--class",
                                      f"name=api,path=/,rate={rate:.3f},arrivals=poisson,"
                                      "timeout_ms=1000", "--duration", f"{total:.0f}",
                                      "--seed", str(i + 1)])
    time.sleep(SETTLE)
    served, share429 = counted(api_port, PHASE)
    row = {"instances": n, "capacity": cap, "sharing": sharing,
           "goodput": served / capacity, "upstream_429": share429,
           "khat": (fleet_of(inst[0][2]) or {}).get("khat") if sharing else None}
    if failures:
        redis.send_signal(signal.SIGSTOP)
        served, share429 = counted(api_port, PHASE)
        row["frozen_goodput"] = served / capacity
        row["frozen_429"] = share429
        row["all_local"] = all((fleet_of(a) or {}).get("source") == "local" for _, _, a in inst)
        redis.send_signal(signal.SIGCONT)
        row["back_s"] = until(lambda: all((fleet_of(a) or {}).get("source") == "fleet"
                                          for _, _, a in inst), 5)
        victim = inst.pop()
        victim[0].kill()
        row["gone_s"] = until(lambda: all((fleet_of(a) or {}).get("members") == n - 1
                                          for _, _, a in inst), 5)
    for p in reversed(procs):
        stop(p)
    return row


def pct(x):
    return "-" if x is None else f"{100 * x:5.1f} %"


def secs(x):
    return "not within 5 s" if x is None else f"{x:.2f} s"


def main():
    print(f"fleet: {SERVICE_MS} ms a request, load {LOAD:g}x the upstream's capacity, Poisson, "
          f"settled {SETTLE:g} s, {PHASE:g} s counted at the upstream")
    print("| instances | slots | sharing | goodput | upstream 429s | fleet's K̂ | Redis frozen: goodput, "
          "429s | back to the fleet's share | one killed: gone for the others |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in INSTANCES:
        for cap in CAPACITIES:
            for sharing in (True, False):
                r = run(n, cap, sharing, failures=sharing)
                frozen = (f"{pct(r['frozen_goodput'])}, {pct(r['frozen_429'])}"
                          if sharing else "-")
                print(f"| {n} | {cap} | {'on' if sharing else 'off'} | {pct(r['goodput'])} | "
                      f"{pct(r['upstream_429'])} | "
                      f"{'-' if r['khat'] is None else format(r['khat'], '.1f')} | {frozen} | "
                      f"{secs(r.get('back_s')) if sharing else '-'} | "
                      f"{secs(r.get('gone_s')) if sharing else '-'} |", flush=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in procs:
            stop(p, signal.SIGKILL)
