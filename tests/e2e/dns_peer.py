"""Peers for the upstream-name tests (tests/e2e/dns_test.cpp).

dns ZONE: a DNS server on 127.0.0.1 (a free UDP port, announced on stderr as
  "dns on 127.0.0.1:PORT") that answers from the JSON file ZONE, read again for
  every query so the test changes the answers by rewriting it:
  {"api.test.": {"a": ["127.0.0.2", "127.0.0.3"], "ttl": 1}}. A name the file
  does not hold is NXDOMAIN; a held name has no AAAA records. Each query is
  counted into ZONE.queries (one line per query: the name and type).

http HOST:PORT SICK_PATH SICK_FILE: an HTTP/1.1 server that answers 503 to
  SICK_PATH while the file SICK_FILE exists, and 200 "ok" to anything else: a
  host that accepts connections and serves, and whose health check fails.
  Announces "listening on HOST:PORT" on stderr.
"""

import http.server
import json
import os
import socketserver
import sys
import threading

from dnslib import QTYPE, RCODE, RR, A
from dnslib.server import DNSLogger, DNSServer


class ZoneResolver:
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()

    def resolve(self, request, handler):
        name = str(request.q.qname)
        qtype = QTYPE[request.q.qtype]
        with self.lock:
            with open(self.path + ".queries", "a") as f:
                f.write(f"{name} {qtype}\n")
            try:
                with open(self.path) as f:
                    zone = json.load(f)
            except (OSError, ValueError):
                zone = {}
        reply = request.reply()
        entry = zone.get(name)
        if entry is None:
            reply.header.rcode = RCODE.NXDOMAIN
            return reply
        if qtype == "A":
            for address in entry.get("a", []):
                reply.add_answer(RR(name, QTYPE.A, rdata=A(address), ttl=int(entry.get("ttl", 1))))
        return reply


def dns(zone):
    server = DNSServer(ZoneResolver(zone), address="127.0.0.1", port=0,
                       logger=DNSLogger(log="-request,-reply,-truncated,-error", prefix=False))
    server.start_thread()
    host, port = server.server.server_address
    print(f"dns on {host}:{port}", file=sys.stderr, flush=True)
    threading.Event().wait()


def http_server(listen, sick_path, sick_file):
    host, port = listen.rsplit(":", 1)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            status = 503 if self.path == sick_path and os.path.exists(sick_file) else 200
            body = b"sick\n" if status == 503 else b"ok\n"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = Server((host, int(port)), Handler)
    bound_host, bound_port = server.server_address[:2]
    print(f"listening on {bound_host}:{bound_port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    if sys.argv[1] == "dns":
        dns(sys.argv[2])
    elif sys.argv[1] == "http":
        http_server(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: dns_peer.py dns ZONE | http HOST:PORT SICK_PATH SICK_FILE")
