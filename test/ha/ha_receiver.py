#!/usr/bin/python3
# -------------------------------------------------------------------------
#
# ha_receiver.py
#	  The HA test's HTTP receiver: answers every request 200 at once and
#	  records, for each, which PostgreSQL node sent it.
#
# Standard library only (and test/receiver.py's server class).  Listens on
# 127.0.0.1 and nowhere else.  Every request is one JSON line in the log
# file, flushed at once (before the answer, which waits --delay-ms, so
# that requests are in flight when a fault strikes):
#
#   {"time": arrival (time.time()), "id": X-Jobflow-Task-Id,
#    "attempt": X-Jobflow-Attempt, "node": name, "pid": sender, "port": peer}
#
# The node is found from the connection itself, not from anything the
# request says: the client's end of a loopback TCP connection is a socket
# of a process on this machine, found through /proc/net/tcp (its inode)
# and /proc/<pid>/fd; a PostgreSQL process's working directory is its data
# directory, which names the node (--node NAME=DATADIR, once per node).
# A process that has already gone (it sent and died) is recorded as node
# "?".  The lookup is made once per connection (keep-alive), so it costs
# nothing per request.  Reading another user's /proc/<pid>/fd needs root
# or the same user: the test runs the servers as root's run user, or as
# itself.
#
# -------------------------------------------------------------------------

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

# test/ on the path, for test/receiver.py's server class
TEST = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TEST not in sys.path:
    sys.path.insert(0, TEST)

from receiver import Server     # noqa: E402

lock = threading.Lock()
log_file = None
nodes = []			# (name, datadir realpath)
listen_port = 0
delay = 0.0			# seconds before each answer


def socket_inode(peer_port):
    """Inode of the client's socket of the connection from 127.0.0.1:peer_port
    to this receiver, or None."""
    local = "0100007F:%04X" % peer_port
    remote = "0100007F:%04X" % listen_port
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[1] == local and fields[2] == remote:
                    return fields[9]
    except OSError:
        pass
    return None


def postgres_pids():
    """The pids (as strings) of the processes named postgres on this
    machine; conftest.py looks for its own among them too."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % pid) as f:
                if f.read().strip() == "postgres":
                    yield pid
        except OSError:
            continue


def owner_of(inode):
    """(pid, node name) of the PostgreSQL process holding socket inode."""
    target = "socket:[%s]" % inode
    for pid in postgres_pids():
        try:
            fd_dir = "/proc/%s/fd" % pid
            for fd in os.listdir(fd_dir):
                try:
                    if os.readlink(os.path.join(fd_dir, fd)) == target:
                        cwd = os.path.realpath("/proc/%s/cwd" % pid)
                        for name, datadir in nodes:
                            if cwd == datadir:
                                return int(pid), name
                        return int(pid), "?" + cwd
                except OSError:
                    continue
        except OSError:
            continue
    return None, "?"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "jobflow-ha-receiver"
    sys_version = ""
    disable_nagle_algorithm = True
    sender = None

    def log_message(self, fmt, *args):
        pass

    def handle_any(self):
        arrival = time.time()
        length = int(self.headers.get("Content-Length") or 0)
        if length > 0:
            self.rfile.read(length)
        if self.sender is None:
            inode = socket_inode(self.client_address[1])
            self.sender = owner_of(inode) if inode else (None, "?")
        rec = {
            "time": arrival,
            "id": int(self.headers.get("X-Jobflow-Task-Id") or 0),
            "attempt": int(self.headers.get("X-Jobflow-Attempt") or 0),
            "node": self.sender[1],
            "pid": self.sender[0],
            "port": self.client_address[1],
        }
        line = json.dumps(rec) + "\n"
        with lock:
            log_file.write(line)
            log_file.flush()
        if delay > 0:
            time.sleep(delay)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_POST = do_PUT = handle_any


def main():
    global log_file, listen_port, delay
    ap = argparse.ArgumentParser(description="jobflow HA test receiver")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--node", action="append", default=[], help="NAME=DATADIR")
    ap.add_argument("--delay-ms", type=int, default=0, help="wait this long before answering")
    args = ap.parse_args()
    delay = args.delay_ms / 1000.0
    for spec in args.node:
        name, datadir = spec.split("=", 1)
        nodes.append((name, os.path.realpath(datadir)))
    log_file = open(args.log, "a", encoding="utf-8")
    server = Server(("127.0.0.1", args.port), Handler)
    listen_port = server.server_address[1]
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
