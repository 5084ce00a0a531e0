#!/usr/bin/env python3
"""TLS peers for tests/e2e/tls_test.cpp: an HTTPS upstream and the clients
that probe Sluice's HTTPS listener. Loopback only.

  tls_peer.py upstream CERT KEY [--client-ca CA]
      An HTTP/1.1 server over TLS on 127.0.0.1, a free port; prints
      "tls-upstream: listening on 127.0.0.1:PORT" on stderr. GET /headers answers
      the request's headers as JSON; GET /sse?n=N&interval_ms=M streams N events.
      With --client-ca it requires a client certificate signed by CA (mTLS).
  tls_peer.py get PORT SNI CAFILE PATH [--tls VERSION] [--twice] [--pause S]
      One GET over TLS to 127.0.0.1:PORT asking for SNI; prints one JSON line:
      status, body, the certificate's subject CN and notAfter, the version, and
      with --twice, whether a second connection resumed the first one's session
      (made S seconds after the first with --pause).
  tls_peer.py stream PORT SNI CAFILE PATH
      An SSE stream over TLS: prints each line as it arrives, then "end".
  tls_peer.py plain PORT          plain HTTP to the TLS port: prints the answer
  tls_peer.py truncated PORT      half a ClientHello, then close
  tls_peer.py silent PORT         connects, sends nothing: prints when closed
  tls_peer.py sslv3 PORT          an SSLv3 ClientHello: prints the answer's bytes
  tls_peer.py old PORT VERSION    a TLS 1.0 or 1.1 handshake: prints the error
  tls_peer.py try PORT            a handshake: prints "handshake done" or the error
"""
import json
import socket
import ssl
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def upstream(cert, key, client_ca):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    if client_ca:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(client_ca)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path.startswith("/sse"):
                query = dict(p.split("=") for p in self.path.partition("?")[2].split("&") if "=" in p)
                n, interval = int(query.get("n", "5")), int(query.get("interval_ms", "100"))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(n):
                    event = f"data: {i}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                    time.sleep(interval / 1000)
                self.wfile.write(b"0\r\n\r\n")
                return
            body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)

    # A handshake that fails (a client that does not verify us, or has no
    # certificate) must not end the server.
    def handle_error(request, client_address):
        pass

    server.handle_error = handle_error
    print(f"tls-upstream: listening on 127.0.0.1:{server.server_address[1]}", file=sys.stderr, flush=True)
    server.serve_forever()


def client_context(cafile, version=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False  # the tests look at which certificate came, not at its name
    ctx.load_verify_locations(cafile)
    ctx.set_alpn_protocols(["http/1.1"])  # what it speaks
    if version == "1.2":
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    elif version == "1.3":
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    return ctx


def read_all(conn):
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def http_get(conn, sni, path):
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n".encode())
    head, _, body = read_all(conn).partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode(errors="replace")


def describe(conn):
    cert = conn.getpeercert()
    subject = dict(x[0] for x in cert.get("subject", ()))
    return {"subject": subject.get("commonName", ""), "not_after": cert.get("notAfter", ""),
            "version": conn.version(), "alpn": conn.selected_alpn_protocol()}


def get(port, sni, cafile, path, version, twice, pause=0.0):
    ctx = client_context(cafile, version)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with ctx.wrap_socket(raw, server_hostname=sni) as conn:
        out = describe(conn)
        out["status"], out["body"] = http_get(conn, sni, path)
        session = conn.session
    if twice:
        time.sleep(pause)
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        with ctx.wrap_socket(raw, server_hostname=sni, session=session) as conn:
            out["resumed"] = conn.session_reused
            out["second_status"], _ = http_get(conn, sni, path)
    print(json.dumps(out), flush=True)


def stream(port, sni, cafile, path):
    ctx = client_context(cafile)
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    with ctx.wrap_socket(raw, server_hostname=sni) as conn:
        print(json.dumps(describe(conn)), flush=True)
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {sni}\r\n\r\n".encode())
        buf = b""
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, _, buf = buf.partition(b"\n")
                print(line.decode(errors="replace").rstrip("\r"), flush=True)
                if line.strip() == b"0" and buf.startswith(b"\r\n"):
                    print("end", flush=True)
                    return
    print("end", flush=True)


def client_hello(version):
    """A minimal ClientHello record for `version` (0x0300: SSLv3)."""
    body = struct.pack(">H", version) + bytes(32) + b"\x00"
    suites = b"\x00\x2f\x00\x35\x00\x0a"
    body += struct.pack(">H", len(suites)) + suites + b"\x01\x00"
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16" + struct.pack(">HH", version, len(hs)) + hs


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "upstream":
        ca = args[args.index("--client-ca") + 1] if "--client-ca" in args else None
        upstream(args[0], args[1], ca)
    elif cmd == "get":
        version = args[args.index("--tls") + 1] if "--tls" in args else None
        pause = float(args[args.index("--pause") + 1]) if "--pause" in args else 0.0
        get(int(args[0]), args[1], args[2], args[3], version, "--twice" in args, pause)
    elif cmd == "stream":
        stream(int(args[0]), args[1], args[2], args[3])
    elif cmd == "plain":
        with socket.create_connection(("127.0.0.1", int(args[0])), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            print(read_all(s).decode(errors="replace"), flush=True)
    elif cmd == "truncated":
        with socket.create_connection(("127.0.0.1", int(args[0])), timeout=10) as s:
            s.sendall(client_hello(0x0303)[:20])
        print("sent", flush=True)
    elif cmd == "silent":
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", int(args[0])), timeout=30) as s:
            s.recv(1)
        print(json.dumps({"closed_after_s": time.monotonic() - start}), flush=True)
    elif cmd == "sslv3":
        with socket.create_connection(("127.0.0.1", int(args[0])), timeout=10) as s:
            s.sendall(client_hello(0x0300))
            print(s.recv(64).hex(), flush=True)
    elif cmd in ("try", "old"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if cmd == "old":
            ctx.set_ciphers("DEFAULT@SECLEVEL=0")
            v = ssl.TLSVersion.TLSv1 if args[1] == "1.0" else ssl.TLSVersion.TLSv1_1
            ctx.minimum_version = ctx.maximum_version = v
        try:
            with ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(args[0])), timeout=10)):
                print("handshake done", flush=True)
        except (ssl.SSLError, OSError) as e:
            print(f"refused: {e}", flush=True)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
