#!/usr/bin/python3
# -------------------------------------------------------------------------
#
# receiver.py
#	  Local HTTP receiver for jobflow's tests, demo and benchmarks.
#
# Standard library only.  Listens on 127.0.0.1 (or ::1 with --host ::1) and
# nowhere else.  What it answers is decided by the path and query alone, so
# a test needs no setup:
#
#   /ok                      200 "ok"
#   /status/N[?retry_after=V] status N (with Retry-After: V if given)
#   /delay/MS                sleeps MS milliseconds, then 200 "ok"
#   /hang                    reads the request, never answers; the thread
#                            ends when the client disconnects
#   /drop                    reads the request and closes the connection
#                            without answering
#   /flaky/N                 500 for the first N requests of each
#                            X-Jobflow-Task-Id, then 200
#   /echo                    200 with the request body echoed back
#   /big[?size=BYTES]        a 1 MB (or BYTES) response
#   /stream[?status=N][&seconds=S]  status N (200), then a chunked body of
#                            1 kB chunks every 10 ms that ends after S
#                            seconds (120) or when the client goes away;
#                            the thread never outlives either
#   /redirect?to=URL[&status=N]  302 (or N) to URL
#   GET  /_requests          JSON list of the requests received
#   POST /_reset             forget them
# The two /_ endpoints are not recorded themselves.
#
# Each record holds the arrival time (time.time()), method, path, query,
# a subset of the headers (lower-cased names), the body (first 4 kB; also
# as "body_b64" when it is not UTF-8), "content_types" when the request
# had more than one Content-Type header, and
# "peer_port": the client's port (one per connection), and
# "inflight": how many requests with the same first path segment were
# being served at arrival, this one included (tests use it to check
# concurrency caps).  Keep-alive is on (HTTP/1.1 with Content-Length on
# every answer) and nothing is printed per request.
#
# -------------------------------------------------------------------------

import argparse
import base64
import json
import os
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

KEPT_HEADERS = ("x-jobflow-task-id", "x-jobflow-attempt", "user-agent",
                "content-type", "content-length", "expect", "x-test",
                "x-api-key", "authorization", "webhook-id", "webhook-timestamp",
                "webhook-signature")
BODY_LOG_MAX = 4096
MAX_RECORDS = 200000

lock = threading.Lock()
records = []
flaky_counts = {}
inflight = {}
log_file = None


def record(rec):
    line = None
    with lock:
        if len(records) >= MAX_RECORDS:
            del records[:MAX_RECORDS // 10]
        records.append(rec)
        if log_file is not None:
            line = json.dumps(rec) + "\n"
            log_file.write(line)
            log_file.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "jobflow-receiver"
    sys_version = ""
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        # Quiet: one stderr line per request would swamp benchmarks.
        pass

    def reply(self, status, body=b"", headers=None):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def handle_any(self):
        arrival = time.time()
        url = urlsplit(self.path)
        path = url.path
        query = parse_qs(url.query)
        body = self.read_body()

        if path == "/_requests" and self.command == "GET":
            with lock:
                data = json.dumps(records)
            self.reply(200, data, {"Content-Type": "application/json"})
            return
        if path == "/_reset" and self.command == "POST":
            with lock:
                records.clear()
                flaky_counts.clear()
            self.reply(200, "reset")
            return

        parts = [p for p in path.split("/") if p]
        kind = parts[0] if parts else ""
        with lock:
            inflight[kind] = inflight.get(kind, 0) + 1
            now_inflight = inflight[kind]
        try:
            hdrs = {}
            for k, v in self.headers.items():
                if k.lower() in KEPT_HEADERS:
                    hdrs[k.lower()] = v
            rec = {
                "time": arrival,
                "method": self.command,
                "path": path,
                "query": url.query,
                "headers": hdrs,
                "body": body[:BODY_LOG_MAX].decode("utf-8", "replace"),
                "inflight": now_inflight,
                "peer_port": self.client_address[1],
            }
            ctypes = self.headers.get_all("Content-Type") or []
            if len(ctypes) > 1:
                rec["content_types"] = ctypes
            try:
                body[:BODY_LOG_MAX].decode("utf-8")
            except UnicodeDecodeError:
                rec["body_b64"] = base64.b64encode(body[:BODY_LOG_MAX]).decode()
            record(rec)
            self.dispatch(kind, parts, query, body)
        finally:
            with lock:
                inflight[kind] -= 1

    def dispatch(self, kind, parts, query, body):
        arg = parts[1] if len(parts) > 1 else ""
        if kind == "ok":
            self.reply(200, "ok")
        elif kind == "status" and arg.isdigit():
            extra = {}
            if "retry_after" in query:
                extra["Retry-After"] = query["retry_after"][0]
            self.reply(int(arg), "status %s" % arg, extra)
        elif kind == "delay" and arg.isdigit():
            time.sleep(int(arg) / 1000.0)
            self.reply(200, "ok")
        elif kind == "hang":
            self.hang()
        elif kind == "drop":
            self.close_connection = True
        elif kind == "flaky" and arg.isdigit():
            task = self.headers.get("X-Jobflow-Task-Id", "")
            with lock:
                seen = flaky_counts.get(task, 0)
                flaky_counts[task] = seen + 1
            if seen < int(arg):
                self.reply(500, "flaky failure %d" % (seen + 1))
            else:
                self.reply(200, "ok")
        elif kind == "echo":
            ctype = self.headers.get("Content-Type") or "application/octet-stream"
            self.reply(200, body, {"Content-Type": ctype,
                                   "X-Echo-Method": self.command})
        elif kind == "big":
            size = int(query.get("size", ["1048576"])[0])
            self.reply(200, b"x" * size)
        elif kind == "stream":
            self.stream(int(query.get("status", ["200"])[0]),
                        float(query.get("seconds", ["120"])[0]))
        elif kind == "redirect" and "to" in query:
            status = int(query.get("status", ["302"])[0])
            self.reply(status, "", {"Location": query["to"][0]})
        else:
            self.reply(404, "not found")

    def stream(self, status, seconds):
        # An endless answer as far as the client can tell: headers at once,
        # then body chunks until the time is up or the client hangs up.
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"%x\r\n%s\r\n" % (1024, b"x" * 1024)
        deadline = time.time() + seconds
        try:
            self.wfile.flush()
            while time.time() < deadline:
                self.wfile.write(chunk)
                self.wfile.flush()
                time.sleep(0.01)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True

    def hang(self):
        # Never answer; return once the peer closes so threads do not pile
        # up (and give up after 10 minutes regardless).
        sock = self.connection
        deadline = time.time() + 600
        try:
            while time.time() < deadline:
                r, _, _ = select.select([sock], [], [], 1.0)
                if r and not sock.recv(4096):
                    break
        except OSError:
            pass
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any
    do_HEAD = do_OPTIONS = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # Clients that give up mid-request are normal here; stay quiet.
        pass


def main():
    global log_file
    ap = argparse.ArgumentParser(description="jobflow test HTTP receiver")
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    ap.add_argument("--port-file", help="write the chosen port here")
    ap.add_argument("--host", default="127.0.0.1", choices=("127.0.0.1", "::1"),
                    help="the loopback address to listen on")
    ap.add_argument("--log", help="append one JSON line per request")
    args = ap.parse_args()

    if args.log:
        log_file = open(args.log, "a", encoding="utf-8")
    if args.host == "::1":
        Server.address_family = socket.AF_INET6
    server = Server((args.host, args.port), Handler)
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.rename(tmp, args.port_file)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
