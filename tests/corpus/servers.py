"""The upstream side of the corpus runner, and the proxies under test.

`Upstream` is a raw TCP server on 127.0.0.1:0 that keeps the exact bytes it
receives on each connection. In `record` mode it reads them with the strict
reader (wire.read_requests) and answers each complete request with a small
200, keeping the connection alive, until the bytes turn ambiguous (then it
only records). In `replay` mode it answers the first request head on each
connection with the bytes of the case under way, then ends its side.

The proxies are child processes of the runner, each with its own config on a
free 127.0.0.1 port, stopped by pid.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import selectors
import shutil
import signal
import socket
import subprocess
import threading
import time

import wire

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclasses.dataclass
class Conn:
    sock: socket.socket
    data: bytes = b""
    answered: int = 0
    continued: bool = False
    replied: bool = False
    closed_by_proxy: bool = False
    closed_here: bool = False
    open: bool = True
    start: int = 0  # where the current case's bytes begin
    answered_before: int = 0
    read: wire.RequestRead | None = None


class Upstream:
    def __init__(self, mode: str):
        assert mode in ("record", "replay")
        self.mode = mode
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        self.lock = threading.Lock()
        self.case_conns: list[Conn] = []
        self.reply = b""
        self.close_all = threading.Event()
        self.closed_all = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    # ---- the runner's side
    def begin_case(self, reply: bytes = b"") -> None:
        """A new case: connections still open (kept alive by the proxy, at a
        request boundary) carry on, their bytes from here on belong to it."""
        with self.lock:
            self.case_conns = [c for c in self.case_conns if c.open]
            for c in self.case_conns:
                c.start = len(c.data)
                c.answered_before = c.answered
            self.reply = reply

    def end_case(self, wait_close: float) -> list[Conn]:
        """The case's connections, after giving the proxy up to wait_close
        seconds to close them. A connection left mid-request or ambiguous is
        closed here, so the next case starts clean; one at a request boundary
        stays open for the proxy to reuse."""
        deadline = time.monotonic() + wait_close
        while time.monotonic() < deadline:
            with self.lock:
                if not any(c.open for c in self.case_conns):
                    break
            time.sleep(0.01)
        self.closed_all.clear()
        self.close_all.set()
        self.closed_all.wait(2)
        with self.lock:
            conns = [dataclasses.replace(c) for c in self.case_conns]
            closed_here = any(c.closed_here for c in self.case_conns)
        if closed_here:
            time.sleep(0.05)  # the proxy sees the close before the next case
        return conns

    def stop(self) -> None:
        self.stopping = True
        self.thread.join(2)
        self.listener.close()

    # ---- the server loop
    def _loop(self) -> None:
        while not self.stopping:
            for key, _ in self.sel.select(0.01):
                if key.data is None:
                    self._accept()
                else:
                    self._read(key.data)
            if self.close_all.is_set():
                with self.lock:
                    for c in self.case_conns:
                        if c.open and not self._clean(c):
                            c.closed_here = True
                            self._close(c)
                self.close_all.clear()
                self.closed_all.set()

    def _clean(self, c: Conn) -> bool:
        """At a request boundary, every request answered, nothing ambiguous."""
        if self.mode == "replay":
            return False
        read = c.read or wire.read_requests(c.data)
        end = read.requests[-1].end if read.requests else 0
        return not read.ambiguities and end == len(c.data)

    def _accept(self) -> None:
        try:
            s, _ = self.listener.accept()
        except BlockingIOError:
            return
        s.setblocking(False)
        c = Conn(s)
        with self.lock:
            self.case_conns.append(c)
        self.sel.register(s, selectors.EVENT_READ, c)

    def _close(self, c: Conn) -> None:
        c.open = False
        self.sel.unregister(c.sock)
        c.sock.close()

    def _read(self, c: Conn) -> None:
        try:
            chunk = c.sock.recv(65536)
        except BlockingIOError:
            return
        except ConnectionResetError:
            chunk = b""
        with self.lock:
            if not chunk:
                c.closed_by_proxy = True
                self._close(c)
                return
            c.data += chunk
            if self.mode == "record":
                self._answer_requests(c)
            else:
                self._replay(c)

    def _send(self, c: Conn, data: bytes) -> None:
        try:
            c.sock.setblocking(True)
            c.sock.sendall(data)
            c.sock.setblocking(False)
        except OSError:
            pass

    def _answer_requests(self, c: Conn) -> None:
        c.read = wire.read_requests(c.data)
        for req in c.read.requests[c.answered:]:
            self._send(c, OK_HEAD if req.method == b"HEAD" else OK)
            c.answered += 1
        if c.read.ambiguities or c.continued:
            return
        # A head that asks for 100-continue and waits for its body gets the 100.
        rest = c.data[c.read.requests[-1].end:] if c.read.requests else c.data
        head_end = rest.find(b"\r\n\r\n")
        if head_end >= 0 and re.search(rb"(?im)^expect:[ \t]*100-continue", rest[:head_end]):
            c.continued = True
            self._send(c, CONTINUE)

    def _replay(self, c: Conn) -> None:
        if c.replied or b"\r\n\r\n" not in c.data:
            return
        c.replied = True
        self._send(c, self.reply)
        try:
            c.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


# ---------------------------------------------------------------- proxies


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port: int, proc: subprocess.Popen, name: str, log: pathlib.Path) -> None:
    for _ in range(200):
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited during start-up:\n{log.read_text(errors='replace')}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port}:\n{log.read_text(errors='replace')}")


class Proxy:
    name = ""

    def __init__(self, workdir: pathlib.Path, upstream_port: int):
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.upstream_port = upstream_port
        self.port = free_port()
        self.log = self.dir / "proxy.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env(), cwd=self.dir)
        wait_port(self.port, self.proc, self.name, self.log)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def env(self) -> dict:
        return {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}

    def command(self) -> list[str]:
        raise NotImplementedError


class SluiceProxy(Proxy):
    name = "sluice"
    binary = ""

    def env(self) -> dict:
        env = super().env()
        env.update(SLUICE_UPSTREAMS=f"127.0.0.1:{self.upstream_port}",
                   SLUICE_LISTEN=f"127.0.0.1:{self.port}",
                   SLUICE_ADMIN_LISTEN=f"127.0.0.1:{free_port()}",
                   SLUICE_THREADS="1", SLUICE_ACCESS_LOG="off",
                   SLUICE_DRAIN_DELAY="0", SLUICE_DRAIN_TIMEOUT="1s")
        return env

    def command(self) -> list[str]:
        return [self.binary]


class NginxProxy(Proxy):
    name = "nginx"

    def command(self) -> list[str]:
        d = self.dir
        (d / "logs").mkdir(exist_ok=True)
        (d / "temp").mkdir(exist_ok=True)
        (d / "nginx.conf").write_text(f"""worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/logs/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/temp/client_body;
    proxy_temp_path {d}/temp/proxy;
    fastcgi_temp_path {d}/temp/fastcgi;
    uwsgi_temp_path {d}/temp/uwsgi;
    scgi_temp_path {d}/temp/scgi;
    upstream backend {{
        server 127.0.0.1:{self.upstream_port};
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{self.port};
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
""")
        return [shutil.which("nginx") or "/usr/sbin/nginx", "-c", f"{d}/nginx.conf", "-p", str(d),
                "-e", f"{d}/logs/error.log", "-g", "daemon off;"]


class HaproxyProxy(Proxy):
    name = "haproxy"

    def command(self) -> list[str]:
        conf = self.dir / "haproxy.cfg"
        conf.write_text(f"""global
    nbthread 1
    maxconn 1024

defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    timeout http-keep-alive 30s

frontend corpus
    bind 127.0.0.1:{self.port}
    default_backend upstream

backend upstream
    server up1 127.0.0.1:{self.upstream_port}
""")
        return [shutil.which("haproxy") or "/usr/sbin/haproxy", "-f", str(conf), "-db"]


PROXIES = {"sluice": SluiceProxy, "nginx": NginxProxy, "haproxy": HaproxyProxy}
