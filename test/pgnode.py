# -------------------------------------------------------------------------
#
# pgnode.py
#     PostgreSQL servers that a test makes for itself, next to the suite's
#     cluster: test/integration/test_failover.py (a primary and its
#     standby), test/integration/test_logical.py (a publisher and a
#     subscriber), test/majors (the clusters of a pg_upgrade) and test/ha
#     (the queries of its Patroni nodes).
#
# Each conftest.py that needs it puts test/ on sys.path, so that a test
# file says "import pgnode".
#
# PostgreSQL refuses to run as root: when the tests run as root, every
# server command runs as JOBFLOW_RUN_USER (postgres by default) through
# runuser.  JOBFLOW_PGBIN is the bin directory of the PostgreSQL a Node
# uses unless told otherwise (default Debian's 15); JOBFLOW_KEEP_CLUSTER=1
# keeps the directory of scratch_dir() (its path is printed).
#
#   as_server_user(cmd, ...)    run a command as the server's OS user
#   append_as_server_user(path, text)
#   scratch_dir(prefix)         a directory the server's OS user owns
#   Queries                     query() and value() over a connect()
#   Node                        one server: initdb, configure, pg_ctl,
#                               start/stop, connect
#   wait_until(predicate, ...)  poll until true, else fail the test
#
# -------------------------------------------------------------------------

import contextlib
import os
import shutil
import subprocess
import tempfile
import time

import psycopg2
import pytest

RUN_USER = os.environ.get("JOBFLOW_RUN_USER") or "postgres"
PGBIN = os.environ.get("JOBFLOW_PGBIN", "/usr/lib/postgresql/15/bin")


class ServerCommandError(subprocess.CalledProcessError):
    """A command of as_server_user() that failed; its message shows the end
    of what the command printed."""

    def __str__(self):
        return "%s\n%s\n%s" % (super().__str__(), (self.stdout or "")[-4000:],
                               (self.stderr or "")[-4000:])


def server_user_cmd(cmd):
    """cmd, to be run as the server's OS user: through runuser when root."""
    if os.geteuid() == 0:
        return ["runuser", "-u", RUN_USER, "--"] + list(cmd)
    return list(cmd)


def as_server_user(cmd, cwd=None, timeout=300, check=True, input=None):
    """Run cmd as the server's OS user; its CompletedProcess (output as
    text).  With check, a non-zero exit raises ServerCommandError, an
    Exception (teardowns catch it), showing the output."""
    cmd = server_user_cmd(cmd)
    res = subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, text=True,
                         timeout=timeout)
    if check and res.returncode != 0:
        raise ServerCommandError(res.returncode, cmd, res.stdout, res.stderr)
    return res


def append_as_server_user(path, text):
    """Append text to a file that the server's OS user owns (a data
    directory's postgresql.conf or pg_hba.conf)."""
    as_server_user(["sh", "-c", "cat >> '%s'" % path], input=text)


@contextlib.contextmanager
def scratch_dir(prefix):
    """A new directory under the system's temporary one, owned by the
    server's OS user, for a test's servers; removed at the end unless
    JOBFLOW_KEEP_CLUSTER is set.  The caller stops its servers first."""
    top = tempfile.mkdtemp(prefix=prefix)
    os.chmod(top, 0o755)
    if os.geteuid() == 0:
        shutil.chown(top, RUN_USER)
    try:
        yield top
    finally:
        if os.environ.get("JOBFLOW_KEEP_CLUSTER"):
            print("kept %s" % top)
        else:
            shutil.rmtree(top, ignore_errors=True)


class Queries:
    """query() and value() for a class whose connect(dbname=...) gives an
    autocommit connection; dbname is the database they use unless told."""

    dbname = "postgres"

    def query(self, sql, args=None, dbname=None):
        """Every row of sql, as tuples (None for a statement without rows),
        on a connection of its own."""
        conn = self.connect(dbname=dbname or self.dbname)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else None
        finally:
            conn.close()

    def value(self, sql, args=None, dbname=None):
        """The first column of sql's first row, or None without rows."""
        rows = self.query(sql, args, dbname)
        return rows[0][0] if rows else None


class Node(Queries):
    """One PostgreSQL server a test makes: in top/name (data/, sock/, log),
    on port, listening on its Unix socket only, as the server's OS user,
    with jobflow preloaded and loopback allowed once configured."""

    pg_ctl_wait = 60        # seconds pg_ctl waits for a start or stop

    def __init__(self, top, name, port, bindir=PGBIN, dbname="postgres"):
        self.bindir = bindir
        self.dir = os.path.join(top, name)
        self.data = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "sock")
        self.log = os.path.join(self.dir, "log")
        self.port = port
        self.dbname = dbname
        as_server_user(["mkdir", "-p", self.sock])

    def bin(self, name):
        """The path of one of the installation's programs."""
        return os.path.join(self.bindir, name)

    def major(self):
        """The installation's major version, from postgres --version."""
        out = subprocess.run([self.bin("postgres"), "--version"], capture_output=True,
                             text=True, check=True).stdout
        return int(out.split()[-1].split(".")[0])

    def initdb(self, checksums=None):
        """A new data directory: superuser postgres, trust, no sync.  Data
        checksums: initdb's default (None), on (True) or off (False, which
        18 needs to be told)."""
        args = [self.bin("initdb"), "-D", self.data, "-U", "postgres",
                "-A", "trust", "--no-sync"]
        if checksums:
            args.append("--data-checksums")
        elif checksums is False and self.major() >= 18:
            args.append("--no-data-checksums")      # 18 turned them on by default
        as_server_user(args)

    def configure(self, extra=()):
        """Append the settings every such server has, then extra (lines of
        postgresql.conf), to postgresql.conf."""
        lines = [
            "port = %d" % self.port,
            "listen_addresses = ''",
            "unix_socket_directories = '%s'" % self.sock,
            "shared_preload_libraries = 'jobflow'",
            "fsync = off",
            # the tests' receivers are on loopback
            "jobflow.allow_networks = '127.0.0.0/8, ::1/128'",
        ] + list(extra)
        append_as_server_user(os.path.join(self.data, "postgresql.conf"),
                              "\n".join(lines) + "\n")

    def pg_ctl(self, *args, options=None):
        """pg_ctl args on this server, waiting; options are the server's
        command-line options (pg_ctl -o)."""
        cmd = [self.bin("pg_ctl"), "-D", self.data, "-l", self.log,
               "-w", "-t", str(self.pg_ctl_wait)]
        if options:
            cmd += ["-o", options]
        as_server_user(cmd + list(args))

    def start(self, options=None):
        """Start the server and wait until it accepts connections."""
        self.pg_ctl("start", options=options)

    def stop(self, mode="fast"):
        """Stop the server in mode (fast, immediate) and wait until it has."""
        self.pg_ctl("-m", mode, "stop")

    def stop_quietly(self):
        """For teardowns: stop the server at once if it may still run
        (its postmaster.pid is there); never raises."""
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            try:
                self.stop("immediate")
            except Exception:
                pass

    def conninfo(self, dbname=None):
        """libpq's connection string of the superuser to dbname."""
        return "host=%s port=%d user=postgres dbname=%s" % (self.sock, self.port,
                                                           dbname or self.dbname)

    def connect(self, dbname=None):
        """A new autocommit connection of the superuser to dbname."""
        conn = psycopg2.connect(self.conninfo(dbname))
        conn.autocommit = True
        return conn


def wait_until(predicate, timeout, what, interval=0.1):
    """predicate()'s first true value, tried every interval seconds; after
    timeout seconds a test failure naming what."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() >= deadline:
            pytest.fail("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)
