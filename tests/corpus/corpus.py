#!/usr/bin/env python3
"""Hostile-client and hostile-upstream corpus suite.

Feeds a proxy the HTTP corpora of other projects (tests/corpus/data, or
SLUICE_CORPORA, or --corpora) over real sockets on 127.0.0.1 and judges what
comes out on both sides.

  request mode   llhttp's `type: request` cases and http-desync-guardian's
                 cases go from a client to the proxy; a recording upstream
                 behind it keeps the exact bytes it receives.
  response mode  llhttp's `type: response` cases come from a hostile upstream
                 as the answer to a plain GET.

Rules, for every case and every proxy:
  - no forwarded ambiguity: what reached the other side reads unambiguously
    under RFC 9112 (wire.py says what counts);
  - no desync: the upstream never reads more requests than the client got
    responses (response mode: the client never gets more responses than it
    sent requests).
Agreement with the corpus, per case (see `judge_request`, `judge_response`).

The suite fails on any forwarded ambiguity, any desync, or any disagreement
that is not in the reviewed list (differences.yaml, for Sluice); a listed case
that agrees again fails too, so the list stays true.

Usage:
  corpus.py --proxy sluice --sluice build/release/app/sluice [--mode request|response|both]
  corpus.py --proxy nginx|haproxy [--mode ...]
Options: --corpora-only (leave out Sluice's own cases.yaml), --lanes N
(proxy+upstream pairs run side by side, default 4), --only SUBSTRING (cases
whose id contains it), --verbose (every case), --json FILE (every outcome),
--no-review (report disagreements, fail on none of them).
Exit status: 0 when the rules hold, 1 when they do not, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import queue
import socket
import sys
import tempfile
import threading
import time

import yaml

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpora  # noqa: E402
import servers  # noqa: E402
import wire  # noqa: E402

# SLUICE_CORPORA, else the copy in the repository (tests/corpus/data, see its README).
DEFAULT_CORPORA = pathlib.Path(os.environ.get("SLUICE_CORPORA") or HERE / "data")
REFUSALS = {400, 413, 414, 431, 501, 505}
RESPONSE_REQUEST = b"GET /corpus HTTP/1.1\r\nHost: corpus.test\r\n\r\n"


@dataclasses.dataclass
class Outcome:
    case: str
    statuses: list[int]  # the final responses the client got, in order
    interim: list[int]  # 1xx
    complete: list[bool]
    closed: bool  # the proxy closed the client's connection
    upstream_bytes: bytes
    upstream_requests: int
    upstream_connections: int
    upstream_closed: bool  # the proxy closed every upstream connection it opened
    ambiguities: list[str]
    desync: bool
    agree: bool = False
    why: str = ""
    mode: str = "request"
    bodies: list[bytes] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        got = ",".join(map(str, self.statuses)) or "none"
        if self.mode == "response":
            return f"answered {got}{' +close' if self.closed else ''}"
        fwd = f"upstream read {self.upstream_requests}" if self.upstream_bytes else "nothing forwarded"
        return f"answered {got}{' +close' if self.closed else ''}; {fwd}"


# ---------------------------------------------------------------- one case


def exchange(port: int, data: bytes, methods: list[str], expected: int) -> tuple[bytes, bool]:
    """Sends data on a new connection; reads until the proxy closes, or the
    expected answers are in and nothing more comes, or it goes quiet."""
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    got = b""
    closed = False
    try:
        s.sendall(data)
    except OSError:
        pass  # it may refuse and close before reading everything
    start = last = time.monotonic()
    while True:
        now = time.monotonic()
        finals, _ = wire.read_responses(got, methods, False)
        done = sum(1 for r in finals if r.complete)
        if done >= expected:
            # All in: a little longer for a close (refusals) or for more than
            # was asked (desync).
            errors = any(r.status >= 400 for r in finals)
            limit = 0.5 if errors else 0.1
        else:
            limit = 2.0  # a proxy still waiting for the rest (or slow: the machine is shared)
        if now - last >= limit or now - start > 6:
            break
        s.settimeout(max(0.01, limit - (now - last)))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        got += chunk
        last = time.monotonic()
    s.close()
    return got, closed


def run_case(lane: "Lane", case: corpora.Case, mode: str) -> Outcome:
    up = lane.upstream
    if mode == "request":
        up.begin_case()
        got, closed = exchange(lane.proxy.port, case.data, case.methods, case.expected_responses)
    else:
        up.begin_case(reply=case.data)
        got, closed = exchange(lane.proxy.port, RESPONSE_REQUEST, ["GET"], 1)
    # The client side is over; the proxy gets a moment to close its upstream
    # side too when it closed the client's (that is what "close both sides" means).
    conns = up.end_case(0.5 if closed else 0.0)
    finals, interim = wire.read_responses(got, case.methods if mode == "request" else ["GET"], closed)
    upstream = b"".join(c.data[c.start:] for c in conns)
    out = Outcome(case=case.id, statuses=[r.status for r in finals], interim=[r.status for r in interim],
                  complete=[r.complete for r in finals], closed=closed, upstream_bytes=upstream,
                  upstream_requests=0, upstream_connections=len(conns),
                  upstream_closed=all(c.closed_by_proxy for c in conns if len(c.data) > c.start),
                  ambiguities=[], desync=False, bodies=[r.body for r in finals], mode=mode)
    if mode == "request":
        for c in conns:
            # A kept-alive connection was at a request boundary when the case began.
            read = wire.read_requests(c.data[c.start:])
            out.upstream_requests += len(read.requests)
            out.ambiguities += read.ambiguities
        out.desync = out.upstream_requests > len(finals)
        judge_request(case, out)
    else:
        out.ambiguities = wire.response_ambiguities(got)
        out.desync = len(finals) > 1
        judge_response(case, out)
    return out


# ---------------------------------------------------------------- agreement


def judge_request(case: corpora.Case, o: Outcome) -> None:
    ok200 = [s for s in o.statuses if 200 <= s < 300]
    forwarded_all = lambda n: o.upstream_requests == n and len(ok200) == n and o.statuses[:n] == ok200
    if case.source == "llhttp":
        n = case.messages
        code = case.error.split()[0] if case.error else None
        if code is None or code == "code=22":
            # code=22 is llhttp pausing at an upgrade or CONNECT, having read the
            # request: what follows is the other protocol's, not an error.
            o.agree = forwarded_all(n)
            o.why = f"llhttp reads {n} request(s)"
            return
        # The requests before the error go through; the bad one is refused and
        # the connection closed: a refusal status, or a close without one when
        # its body was already on its way (or it is data after a
        # `Connection: close` request, which is never read).
        refused = len(o.statuses) > n and o.statuses[n] in REFUSALS
        cut = len(o.statuses) == n and (case.heads > n or code == "code=5")
        o.agree = o.upstream_requests == n and o.statuses[:n] == [200] * n and (refused or cut) and o.closed
        o.why = f"llhttp: {case.error}" + (f" after {n} request(s)" if n else "")
        return
    tier = case.tier
    refused = len(o.statuses) == 1 and o.statuses[0] in REFUSALS and o.upstream_requests == 0
    forwarded = o.upstream_requests == 1 and o.statuses == [200]
    if tier == "Severe":
        o.agree = o.statuses == [400] and not o.upstream_bytes and o.closed
        o.why = "Severe: 400 and close, nothing forwarded"
    elif tier == "Ambiguous":
        o.agree = (refused and o.closed) or (forwarded and o.closed and o.upstream_closed)
        o.why = "Ambiguous: refuse, or forward and close both sides"
    elif tier == "Acceptable":
        o.agree = refused or forwarded
        o.why = "Acceptable: refuse or forward"
    else:
        o.agree = forwarded
        o.why = "Compliant: forwarded"
    if case.upstream_has is not None and o.agree:
        o.agree = case.upstream_has in o.upstream_bytes
        o.why += f", the upstream gets {case.upstream_has.decode('latin-1')!r}"


def judge_response(case: corpora.Case, o: Outcome) -> None:
    statuses = corpora.message_statuses(case)
    finals = [i for i, s in enumerate(statuses) if not 100 <= s < 200 or s == 101]
    bodies = corpora.message_bodies(case)
    if case.error is not None and case.heads == 0:
        o.agree = o.statuses == [502]
        o.why = f"llhttp: {case.error} in the head: 502"
        return
    if not finals or (case.error is not None and case.messages <= finals[0]):
        # llhttp rejects the answer after its head: never a clean end.
        clean = len(o.statuses) == 1 and o.complete[0] and o.statuses[0] != 502
        o.agree = not clean and (o.statuses == [502] or o.closed)
        o.why = f"llhttp: {case.error or 'no final answer'}: 502, or the answer visibly cut"
        return
    i = finals[0]
    # Whether the answer is whole in what the upstream sent, its end marked by
    # the upstream's close: a Content-Length or chunked body cut short is not.
    sent, _ = wire.read_responses(case.data, ["GET"], True)
    whole = len(sent) > 0 and sent[0].complete
    if not whole:
        clean = len(o.statuses) == 1 and o.complete[0] and o.statuses[0] != 502
        o.agree = not clean and (o.statuses == [502] or o.closed)
        o.why = "the upstream's answer stops short: 502, or the answer visibly cut"
        return
    want_body = bodies[i] if i < len(bodies) else b""
    o.agree = (o.statuses == [statuses[i]] and o.complete == [True]
               and (o.bodies[0] == want_body or statuses[i] in (204, 304)))
    o.why = f"llhttp reads {statuses[i]} with a {len(want_body)}-byte body: relayed intact"


# ---------------------------------------------------------------- lanes


class Lane:
    def __init__(self, index: int, proxy_cls, mode: str, tmp: pathlib.Path):
        self.upstream = servers.Upstream("record" if mode == "request" else "replay")
        self.proxy = proxy_cls(tmp / f"{proxy_cls.name}-{mode}-{index}", self.upstream.port)
        try:
            self.proxy.start()
        except BaseException:
            self.stop()  # a proxy that started but never listened goes too
            raise

    def stop(self) -> None:
        self.proxy.stop()
        self.upstream.stop()


def run_mode(proxy_cls, mode: str, cases: list[corpora.Case], lanes: int, tmp: pathlib.Path) -> list[Outcome]:
    todo: queue.Queue = queue.Queue()
    for i, c in enumerate(cases):
        todo.put((i, c))
    results: list[Outcome | None] = [None] * len(cases)
    started: list[Lane] = []
    errors: list[BaseException] = []

    def work(lane: Lane) -> None:
        while True:
            try:
                i, c = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[i] = run_case(lane, c, mode)
            except BaseException as e:  # noqa: BLE001 - reported below, the run fails
                errors.append(e)
                return

    try:
        for i in range(max(1, min(lanes, len(cases)))):
            started.append(Lane(i, proxy_cls, mode, tmp))
        threads = [threading.Thread(target=work, args=(lane,)) for lane in started]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for lane in started:
            lane.stop()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


# ---------------------------------------------------------------- review list


def load_review(path: pathlib.Path) -> dict[str, str]:
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    out = {}
    for e in entries:
        if not e.get("reason"):
            raise SystemExit(f"{path}: {e.get('case')}: every entry needs its reason")
        if e["case"] in out:
            raise SystemExit(f"{path}: {e['case']} is listed twice")
        out[e["case"]] = e["reason"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--proxy", choices=sorted(servers.PROXIES), default="sluice")
    ap.add_argument("--sluice", help="the sluice binary (for --proxy sluice)")
    ap.add_argument("--mode", choices=["request", "response", "both"], default="both")
    ap.add_argument("--corpora", type=pathlib.Path, default=DEFAULT_CORPORA)
    ap.add_argument("--review", type=pathlib.Path, default=HERE / "differences.yaml")
    ap.add_argument("--no-review", action="store_true")
    ap.add_argument("--lanes", type=int, default=4)
    ap.add_argument("--only", default="")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--corpora-only", action="store_true",
                    help="leave out Sluice's own cases (tests/corpus/cases.yaml), as compare.sh does")
    ap.add_argument("--json", type=pathlib.Path)
    args = ap.parse_args()

    proxy_cls = servers.PROXIES[args.proxy]
    if args.proxy == "sluice":
        if not args.sluice:
            ap.error("--proxy sluice needs --sluice BINARY")
        # The sanitizer jobs of scripts/test.sh name the sluice their preset built.
        binary = os.environ.get("TEST_SLUICE_BIN") or args.sluice
        servers.SluiceProxy.binary = str(pathlib.Path(binary).resolve())
    corpora_dir = args.corpora.resolve()
    for sub in ("llhttp/test/request", "llhttp/test/response", "http-desync-guardian/tests"):
        if not (corpora_dir / sub).is_dir():
            ap.error(f"no {corpora_dir / sub} (--corpora or SLUICE_CORPORA: a folder laid out as tests/corpus/data)")
    review = {} if args.no_review or args.proxy != "sluice" else load_review(args.review)

    modes = ["request", "response"] if args.mode == "both" else [args.mode]
    failed = False
    all_outcomes = []
    with tempfile.TemporaryDirectory(prefix="sluice-corpus-") as tmp:
        for mode in modes:
            if mode == "request":
                cases = corpora.load_llhttp(corpora_dir / "llhttp", "request") + \
                        corpora.load_guardian(corpora_dir / "http-desync-guardian") + \
                        ([] if args.corpora_only else corpora.load_tiered([HERE / "cases.yaml"], "sluice"))
            else:
                cases = corpora.load_llhttp(corpora_dir / "llhttp", "response")
            cases = [c for c in cases if args.only in c.id]
            t0 = time.monotonic()
            outcomes = run_mode(proxy_cls, mode, cases, args.lanes, pathlib.Path(tmp))
            took = time.monotonic() - t0
            failed |= report(args.proxy, mode, cases, outcomes, review, args.verbose, took)
            all_outcomes += outcomes
    if args.json:
        args.json.write_text(json.dumps([
            {**{k: v for k, v in dataclasses.asdict(o).items() if k not in ("upstream_bytes", "bodies")},
             "upstream_bytes": o.upstream_bytes.decode("latin-1")} for o in all_outcomes], indent=1))
    if review and not args.only:
        # Every listed case of the modes run must exist (a renamed case would
        # otherwise leave a stale entry behind).
        ids = {o.case for o in all_outcomes}
        for k in review:
            if ("response" if k.startswith("llhttp/response/") else "request") in modes and k not in ids:
                print(f"FAIL the review list names a case that is not in the corpora: {k}")
                failed = True
    return 1 if failed else 0


def report(proxy: str, mode: str, cases, outcomes: list[Outcome], review: dict[str, str],
           verbose: bool, took: float) -> bool:
    failed = False
    agree = sum(o.agree for o in outcomes)
    amb = [o for o in outcomes if o.ambiguities]
    desync = [o for o in outcomes if o.desync]
    for o in outcomes:
        listed = o.case in review
        line = f"{o.case}: {o.summary()} [{o.why}]"
        if o.ambiguities:
            print(f"FAIL forwarded ambiguity: {line}: {'; '.join(o.ambiguities)}")
            failed = True
        if o.desync:
            print(f"FAIL desync: {line}")
            failed = True
        if not o.agree and review is not None and proxy == "sluice" and review and not listed:
            print(f"FAIL disagrees, not reviewed: {line}")
            failed = True
        elif o.agree and listed:
            print(f"FAIL listed in the review but agrees now: {line}")
            failed = True
        elif not o.agree:
            print(f"differs{' (reviewed)' if listed else ''}: {line}")
        elif verbose:
            print(f"agrees: {line}")
    print(f"== {proxy} {mode}: {len(outcomes)} cases in {took:.1f}s; agreement {agree}/{len(outcomes)}"
          f" ({100.0 * agree / max(1, len(outcomes)):.1f}%); forwarded ambiguities {len(amb)}; desyncs {len(desync)}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
