# -------------------------------------------------------------------------
#
# nginx_receiver.py
#     A real nginx on 127.0.0.1, over HTTP and over HTTPS with a test CA,
#     for the tests of connection reuse against production-like receivers.
#
# test/receiver.py keeps every connection open; production receivers close
# idle keep-alive connections (nginx after keepalive_timeout, Node.js after
# 5 s) and restart on deploys, and over TLS they say so with a close_notify
# alert before their FIN.  This module makes such a receiver:
#
#   make_ca(directory)       a test CA and a certificate for 127.0.0.1 and
#                            "localhost" signed by it (openssl), returns
#                            (ca_file, cert_file, key_file)
#   Nginx(keepalive_timeout="1s", http2=False, ca_from=None, client_ca=None)
#       (ca_from: another Nginx whose CA and certificate to use; client_ca:
#       a PEM file of client CAs, which adds two more https ports,
#       .mtls_ports, that require a client certificate signed by one of
#       them: ssl_verify_client on; /to-other there redirects (307) to
#       /redirected on the other one)
#       .start(), .stop(), .reload() (a graceful restart: new workers take
#       over, the old ones close their idle connections), .url(scheme,
#       path), .log() (one dict per request: arrival, uri, task id,
#       attempt, status, connection serial and requests on it, the port,
#       and the subject of the client certificate and nginx's verdict on
#       it, $ssl_client_s_dn (no blank in it) and $ssl_client_verify: "-"
#       and NONE without one)
#
# Every path answers 200 "ok".  Its files live in a directory of its own
# that everyone may read (the server, which runs as another user, reads
# the CA), removed by stop().  When the tests run as root, nginx's
# workers run as nobody (the master opens the logs and keys).
#
# -------------------------------------------------------------------------

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

NGINX = "/usr/sbin/nginx"

CONF = """
%(user_line)s
worker_processes 1;
pid %(prefix)s/nginx.pid;
error_log %(prefix)s/error.log warn;
events { worker_connections 4096; }
http {
    client_body_temp_path %(prefix)s/tmp/body;
    proxy_temp_path %(prefix)s/tmp/proxy;
    fastcgi_temp_path %(prefix)s/tmp/fastcgi;
    uwsgi_temp_path %(prefix)s/tmp/uwsgi;
    scgi_temp_path %(prefix)s/tmp/scgi;
    log_format jobflow '$msec $request_uri $http_x_jobflow_task_id $http_x_jobflow_attempt $status $connection $connection_requests $server_protocol $server_port $ssl_client_s_dn $ssl_client_verify';
    access_log %(prefix)s/access.log jobflow;
    keepalive_requests 1000000;
    keepalive_timeout %(keepalive)s;
    server {
        listen 127.0.0.1:%(http_port)d;
        location / { return 200 "ok\\n"; }
    }
    server {
        listen 127.0.0.1:%(https_port)d ssl%(http2)s;
        ssl_certificate %(cert)s;
        ssl_certificate_key %(key)s;
        location / { return 200 "ok\\n"; }
    }
%(mtls_servers)s
}
"""

MTLS_SERVER = """
    server {
        listen 127.0.0.1:%(port)d ssl;
        ssl_certificate %(cert)s;
        ssl_certificate_key %(key)s;
        ssl_client_certificate %(client_ca)s;
        ssl_verify_client on;
        location / { return 200 "ok\\n"; }
        location /to-other { return 307 https://127.0.0.1:%(other)d/redirected$is_args$args; }
    }
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_ca(directory):
    """A test CA and a server certificate for 127.0.0.1 signed by it."""
    d = str(directory)
    ca_key, ca = os.path.join(d, "ca.key"), os.path.join(d, "ca.pem")
    key, csr, cert = (os.path.join(d, n) for n in ("server.key", "server.csr", "server.pem"))
    ext = os.path.join(d, "server.ext")
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=jobflow test CA", "-keyout", ca_key, "-out", ca)
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", key, "-out", csr)
    with open(ext, "w") as f:
        f.write("subjectAltName = IP:127.0.0.1, DNS:localhost\n"
                "extendedKeyUsage = serverAuth\n")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
        "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", cert)
    for f in (ca, cert):
        os.chmod(f, 0o644)
    return ca, cert, key


class Nginx:
    def __init__(self, keepalive_timeout="1s", http2=False, ca_from=None, client_ca=None):
        self.prefix = tempfile.mkdtemp(prefix="jobflow-nginx-")
        os.chmod(self.prefix, 0o755)
        os.makedirs(os.path.join(self.prefix, "tmp"))
        if ca_from is None:
            self.ca, cert, key = make_ca(self.prefix)
        else:
            self.ca, cert, key = ca_from.ca, ca_from.cert, ca_from.key
        self.cert, self.key = cert, key
        self.http_port, self.https_port = free_port(), free_port()
        self.mtls_ports = [free_port(), free_port()] if client_ca else []
        mtls_servers = "".join(MTLS_SERVER % dict(port=p, other=o, cert=cert, key=key,
                                                  client_ca=client_ca)
                               for p, o in zip(self.mtls_ports, self.mtls_ports[::-1]))
        if os.getuid() == 0:
            user_line = "user nobody nogroup;"
        else:
            user_line = ""
        with open(os.path.join(self.prefix, "nginx.conf"), "w") as f:
            f.write(CONF % dict(user_line=user_line, prefix=self.prefix,
                                keepalive=keepalive_timeout,
                                http_port=self.http_port, https_port=self.https_port,
                                http2=" http2" if http2 else "", cert=cert, key=key,
                                mtls_servers=mtls_servers))
        self.pid = None

    def _nginx(self, *args):
        subprocess.run([NGINX, "-p", self.prefix, "-e", os.path.join(self.prefix, "error.log"),
                        "-c", os.path.join(self.prefix, "nginx.conf"), "-q"] + list(args),
                       check=True, capture_output=True)

    def start(self):
        self._nginx()
        pidfile = os.path.join(self.prefix, "nginx.pid")
        for _ in range(100):
            if os.path.exists(pidfile) and os.path.getsize(pidfile) > 0:
                break
            time.sleep(0.05)
        self.pid = int(open(pidfile).read())
        for port in [self.http_port, self.https_port] + self.mtls_ports:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
        return self

    def workers(self):
        """The pids of the master's worker processes."""
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.pid)],
                             capture_output=True, text=True).stdout
        return {int(p) for p in out.split()}

    def reload(self, timeout=10.0):
        """A graceful restart: new workers, the old ones gone (and their
        idle connections closed)."""
        old = self.workers()
        os.kill(self.pid, signal.SIGHUP)
        deadline = time.time() + timeout
        while time.time() < deadline:
            now = self.workers()
            if now and not (now & old):
                return
            time.sleep(0.02)
        raise AssertionError("nginx's old workers did not go")

    def stop(self):
        if self.pid is not None:
            self._kill()
        shutil.rmtree(self.prefix, ignore_errors=True)

    def _kill(self):
        try:
            os.kill(self.pid, signal.SIGQUIT)
        except ProcessLookupError:
            self.pid = None
            return
        for _ in range(100):
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(self.pid, signal.SIGKILL)
        self.pid = None

    def url(self, scheme, path):
        port = self.https_port if scheme == "https" else self.http_port
        return "%s://127.0.0.1:%d%s" % (scheme, port, path)

    def log(self):
        rows = []
        path = os.path.join(self.prefix, "access.log")
        if not os.path.exists(path):
            return rows
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) < 8:
                    continue
                rows.append(dict(msec=float(p[0]), uri=p[1], task_id=p[2], attempt=p[3],
                                 status=int(p[4]), connection=int(p[5]),
                                 connection_requests=int(p[6]), protocol=p[7],
                                 port=int(p[8]) if len(p) > 8 else None,
                                 client_subject=p[9] if len(p) > 9 else None,
                                 client_verify=" ".join(p[10:]) if len(p) > 10 else None))
        return rows
