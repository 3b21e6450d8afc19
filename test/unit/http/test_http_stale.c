/*-------------------------------------------------------------------------
 *
 * test_http_stale.c
 *	  The dispatcher's pooled connections: the table of kept HTTP/1
 *	  sockets (sockets.c) and how requests to one host share connections.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/internal.h"
#include "http_harness.h"
#include "unit.h"

/*
 * A burst to a plain-HTTP/1 receiver must not wait behind the first
 * request's answer: with CURLOPT_PIPEWAIT, curl 7.88 keeps every other
 * request to the host pending until the first response's status line says
 * the server cannot multiplex, and wakes them only when the first transfer
 * ends.  So the quick requests must finish before the slow one.
 */
static void
test_burst_not_serialised(void)
{
	JfHttpConfig c = default_config();
	JfHttp	   *h = make(&c);
	Collected	col = {0};
	JfHttpResult *slow;

	CHECK(submit(h, 1, url("127.0.0.1", "/delay/1500"), "GET", NULL, 0, NULL, 10000));
	for (int i = 2; i <= 5; i++)
		CHECK(submit(h, i, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL, 10000));
	run_until(h, &col, 5, 15000);
	CHECK(col.n == 5);
	slow = by_id(&col, 1);
	CHECK(slow != NULL && slow->http_status == 200);
	for (int i = 2; i <= 5; i++)
	{
		JfHttpResult *q = by_id(&col, i);

		CHECKF(q != NULL && q->http_status == 200, "id %d", i);
		CHECKF(q != NULL && slow != NULL && q->finished_at_ms < slow->finished_at_ms,
			   "id %d finished after the slow request", i);
	}
	collected_free(&col);
	jf_http_destroy(h);
}

/*
 * Nor may a request wait past its own timeout behind another request to
 * the same host, unsent: the quick one's 1 s runs out while it waits.
 */
static void
test_no_timeout_behind_slow(void)
{
	JfHttpConfig c = default_config();
	JfHttp	   *h = make(&c);
	Collected	col = {0};
	JfHttpResult *q;

	CHECK(submit(h, 1, url("127.0.0.1", "/delay/2500"), "GET", NULL, 0, NULL, 10000));
	CHECK(submit(h, 2, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL, 1000));
	run_until(h, &col, 2, 15000);
	q = by_id(&col, 2);
	CHECKF(q != NULL && q->error_kind == JF_HTTP_OK && q->http_status == 200,
		   "id 2: kind %d status %d: %s", q ? q->error_kind : -1,
		   q ? q->http_status : -1, q ? q->error : "");
	collected_free(&col);
	jf_http_destroy(h);
}

/* ---------------------------------------------------------------------
 * A receiver of our own: one answer per connection, then a reset
 * ---------------------------------------------------------------------
 */

static int rst_listener = -1;
static int rst_port;

/*
 * Each connection gets one keep-alive answer; 100 ms later the server
 * resets it (SO_LINGER 0), as a crashed or a load-balanced receiver does.
 */
static void *
rst_server(void *arg)
{
	(void) arg;
	for (;;)
	{
		int			c = accept(rst_listener, NULL, NULL);
		char		buf[4096];
		size_t		got = 0;
		struct linger lg = {1, 0};
		static const char answer[] =
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

		if (c < 0)
			return NULL;
		while (got < sizeof(buf) - 1)
		{
			ssize_t		n = read(c, buf + got, sizeof(buf) - 1 - got);

			if (n <= 0)
				break;
			got += n;
			buf[got] = '\0';
			if (strstr(buf, "\r\n\r\n"))
				break;
		}
		if (write(c, answer, sizeof(answer) - 1) < 0)
			break;
		usleep(100 * 1000);
		setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(c);
	}
	return NULL;
}

static bool
rst_start(void)
{
	struct sockaddr_in a;
	socklen_t	alen = sizeof(a);
	pthread_t	t;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	rst_listener = socket(AF_INET, SOCK_STREAM, 0);
	if (rst_listener < 0 ||
		bind(rst_listener, (struct sockaddr *) &a, sizeof(a)) != 0 ||
		listen(rst_listener, 16) != 0 ||
		getsockname(rst_listener, (struct sockaddr *) &a, &alen) != 0)
		return false;
	rst_port = ntohs(a.sin_port);
	return pthread_create(&t, NULL, rst_server, NULL) == 0 && pthread_detach(t) == 0;
}

/*
 * curl finds each reset connection dead and closes it through our close
 * callback; the table must forget it then, although a reset socket has no
 * peer address any more.  Otherwise every reset connection stays in the
 * table for good (a receiver that resets its idle connections grows the
 * worker's memory without end), under a descriptor number that curl soon
 * hands to another connection.
 */
static void
test_reset_connections_forgotten(void)
{
	JfHttpConfig c = default_config();
	JfHttp	   *h = make(&c);
	char		u[128];
	int			rounds = 20;

	snprintf(u, sizeof(u), "http://127.0.0.1:%d/ok", rst_port);
	for (int i = 1; i <= rounds; i++)
	{
		Collected	col = {0};

		CHECK(submit(h, i, u, "GET", NULL, 0, NULL, 5000));
		run_until(h, &col, 1, 5000);
		CHECKF(col.n == 1 && col.r[0].http_status == 200, "round %d", i);
		collected_free(&col);
		usleep(250 * 1000);		/* the server resets it meanwhile */
	}
	CHECKF(h->nsockets <= 1, "%zu kept sockets after %d connections, all closed but one",
		   h->nsockets, rounds);
	jf_http_destroy(h);
}

/* ---------------------------------------------------------------------
 * Two receivers on one port, reached from one local port
 * ---------------------------------------------------------------------
 */

#define PEER_PORT 8080

/*
 * Keep-alive answers on each connection; a "junk" receiver also writes a
 * byte on each connection 100 ms after each answer (its own business:
 * only its own requests may pay for it).
 */
typedef struct PeerServer
{
	int			listener;
	bool		junk;
	int			accepted;
} PeerServer;

static void *
peer_conn(void *arg)
{
	intptr_t	v = (intptr_t) arg;
	int			c = (int) (v >> 1);
	bool		junk = (v & 1) != 0;
	static const char answer[] =
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

	for (;;)
	{
		char		buf[4096];
		size_t		got = 0;

		while (got < sizeof(buf) - 1)
		{
			ssize_t		n = read(c, buf + got, sizeof(buf) - 1 - got);

			if (n <= 0)
			{
				close(c);
				return NULL;
			}
			got += n;
			buf[got] = '\0';
			if (strstr(buf, "\r\n\r\n"))
				break;
		}
		if (write(c, answer, sizeof(answer) - 1) < 0)
			break;
		if (junk)
		{
			usleep(100 * 1000);
			if (write(c, "X", 1) < 0)
				break;
		}
	}
	close(c);
	return NULL;
}

static void *
peer_server(void *arg)
{
	PeerServer *ps = arg;

	for (;;)
	{
		int			c = accept(ps->listener, NULL, NULL);
		pthread_t	t;

		if (c < 0)
			return NULL;
		__atomic_add_fetch(&ps->accepted, 1, __ATOMIC_SEQ_CST);
		pthread_create(&t, NULL, peer_conn, (void *) (((intptr_t) c << 1) | ps->junk));
		pthread_detach(t);
	}
	return NULL;
}

static bool
peer_start(PeerServer *ps, const char *ip, bool junk)
{
	struct sockaddr_in a;
	pthread_t	t;
	int			one = 1;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(PEER_PORT);
	inet_pton(AF_INET, ip, &a.sin_addr);
	ps->junk = junk;
	ps->accepted = 0;
	ps->listener = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(ps->listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	return ps->listener >= 0 &&
		bind(ps->listener, (struct sockaddr *) &a, sizeof(a)) == 0 &&
		listen(ps->listener, 16) == 0 &&
		pthread_create(&t, NULL, peer_server, ps) == 0 && pthread_detach(t) == 0;
}

static bool
write_file(const char *path, const char *s)
{
	int			fd = open(path, O_WRONLY);
	bool		ok;

	if (fd < 0)
		return false;
	ok = write(fd, s, strlen(s)) == (ssize_t) strlen(s);
	close(fd);
	return ok;
}

/*
 * A network namespace of our own, with its loopback up and only two
 * ephemeral ports: then the kernel gives connections to different peers
 * the same local port, as it does anywhere when there are many
 * connections (a local port is unique per peer, not per host).  False if
 * the system allows no user namespaces.
 */
static bool
private_network(void)
{
	char		map[64];
	uid_t		uid = getuid();
	gid_t		gid = getgid();
	struct ifreq ifr;
	int			s;

	if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0)
		return false;
	snprintf(map, sizeof(map), "0 %d 1", (int) uid);
	if (!write_file("/proc/self/uid_map", map))
		return false;
	(void) write_file("/proc/self/setgroups", "deny");
	snprintf(map, sizeof(map), "0 %d 1", (int) gid);
	if (!write_file("/proc/self/gid_map", map))
		return false;
	s = socket(AF_INET, SOCK_DGRAM, 0);
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0)
		return false;
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
		return false;
	close(s);
	return write_file("/proc/sys/net/ipv4/ip_local_port_range", "40000 40001");
}

/*
 * The kept connection to one receiver must not stand for another's that
 * has the same local and remote ports: a tenant's receiver that writes on
 * its idle connections would otherwise get another tenant's healthy
 * connection closed and its request started again (or hide that
 * tenant's stale connection).  Runs in a child, in its own network.
 */
static void
collision_child(void)
{
	static PeerServer victim,
				junk;
	JfHttpConfig c = default_config();
	JfHttp	   *h;
	Collected	col = {0};
	char		uv[64],
				uj[64];

	if (!private_network())
	{
		printf("test_http_stale: no user namespaces here, collision test skipped\n");
		_exit(0);
	}
	if (!peer_start(&victim, "127.0.0.2", false) || !peer_start(&junk, "127.0.0.3", true))
		_exit(2);
	snprintf(uv, sizeof(uv), "http://127.0.0.2:%d/v", PEER_PORT);
	snprintf(uj, sizeof(uj), "http://127.0.0.3:%d/j", PEER_PORT);
	h = make(&c);
	/* the victim's connection is kept first, the junk receiver's after */
	CHECK(submit(h, 1, uv, "GET", NULL, 0, NULL, 5000));
	run_until(h, &col, 1, 5000);
	CHECK(submit(h, 2, uj, "GET", NULL, 0, NULL, 5000));
	run_until(h, &col, 2, 5000);
	usleep(300 * 1000);			/* the junk arrives */
	CHECK(submit(h, 3, uv, "GET", NULL, 0, NULL, 5000));
	run_until(h, &col, 3, 5000);
	CHECK(col.n == 3);
	for (int i = 0; i < col.n; i++)
		CHECKF(col.r[i].http_status == 200, "id %ld", (long) col.r[i].task_id);
	CHECKF(h->stale_restarts == 0, "%lu restarts of the victim's request",
		   (unsigned long) h->stale_restarts);
	CHECKF(victim.accepted == 1, "the victim's receiver saw %d connections",
		   victim.accepted);
	collected_free(&col);
	jf_http_destroy(h);
	fflush(stdout);
	_exit(unit_failed > 0 ? 1 : 0);
}

static void
test_port_collision(void)
{
	pid_t		pid = fork();
	int			status = 0;

	if (pid == 0)
		collision_child();
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		   "the collision child failed (status %d)", status);
}

int
main(void)
{
	if (!harness_start())
		return 1;
	test_burst_not_serialised();
	test_no_timeout_behind_slow();
	if (!rst_start())
	{
		fprintf(stderr, "could not start the resetting server\n");
		return 1;
	}
	test_reset_connections_forgotten();
	test_port_collision();
	harness_stop();
	return unit_done("test_http_stale");
}
