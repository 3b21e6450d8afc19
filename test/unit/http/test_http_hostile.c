/*-------------------------------------------------------------------------
 *
 * test_http_hostile.c
 *	  A third review of issue 20, items 7 and 8, from the receiver's side.
 *
 * Receivers that answer without end before the body (item 8).
 * A hostile receiver, forked here on a free 127.0.0.1 port, answers each
 * request with a status line and then, as fast as the socket takes them,
 * one of: header lines without end; interim (1xx) responses without end;
 * or a chunked body that ends at once and is followed by trailer lines
 * without end.  No body byte ever reaches write_cb, so the excerpt cap
 * that ends an endless body does not apply.  libcurl keeps every header
 * and trailer line it passes on (for curl_easy_header()); the build of
 * libcurl under test may cap headers (Debian's 7.88 caps them at 300 kB)
 * but caps no trailers: the worker's memory then grows with every line
 * until the request's timeout (an hour at most), 1.5 GB in 20 s here.
 *
 * Each such request must end well before its timeout, with an error, and
 * leave the process's memory about where it was.  The receiver stops
 * after 256 MB per request and then holds the connection open, so that
 * a dispatcher that keeps reading ends in a timeout instead of in an
 * exhausted machine.
 *
 * A name with a denied and an allowed address (item 7).  Each address is
 * checked as curl tries it (open_socket_cb), so the denied one is never
 * connected; but the refusal marks the whole request as denied, and when
 * the allowed address then refuses the connection (a receiver restarting)
 * the task fails at once as "refused by jobflow" instead of being retried
 * as the connection error it is.  "localhost" is such a name under the
 * README's own example, allow_networks = '127.0.0.1/32:8080'.
 *
 * An address of this host that no list names (item 7, found after the
 * review): a connection whose local address is its remote one reached
 * this host, and counts as loopback.  Tested with 127.0.0.2 while the
 * deny list names 127.0.0.1 alone, the way a host's public address is
 * named by no list.
 *
 * Loopback only: the denied addresses are refused before a socket exists.
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "http_harness.h"
#include "unit.h"

#define HOSTILE_CAP		(256L * 1024 * 1024)
#define TIMEOUT_MS		20000

static pid_t hostile_pid = -1;
static int	hostile_port;

static void
kill_hostile(void)
{
	if (hostile_pid > 0)
	{
		kill(hostile_pid, SIGKILL);
		waitpid(hostile_pid, NULL, 0);
		hostile_pid = -1;
	}
}

/* Resident set size of this process, in kB. */
static long
rss_kb(void)
{
	FILE	   *f = fopen("/proc/self/status", "r");
	char		line[256];
	long		kb = 0;

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kb = atol(line + 6);
	fclose(f);
	return kb;
}

/* Send what until the peer goes away or the cap is reached. */
static void
flood(int c, const char *what, size_t len)
{
	long		sent = 0;

	while (sent < HOSTILE_CAP)
	{
		ssize_t		n = send(c, what, len, MSG_NOSIGNAL);

		if (n <= 0)
			return;
		sent += n;
	}
	/* then hold the connection until the client closes it */
	for (;;)
	{
		struct pollfd p = {.fd = c,.events = POLLIN};
		char		buf[256];

		if (poll(&p, 1, 60000) <= 0 || recv(c, buf, sizeof(buf), 0) <= 0)
			return;
	}
}

/* One connection: read the request head, answer by its path. */
static void
serve(int c)
{
	char		req[8192];
	size_t		got = 0;
	char		line[1100];

	while (got < sizeof(req) - 1)
	{
		ssize_t		n = recv(c, req + got, sizeof(req) - 1 - got, 0);

		if (n <= 0)
			return;
		got += n;
		req[got] = '\0';
		if (strstr(req, "\r\n\r\n"))
			break;
	}
	if (strstr(req, "GET /headers "))
	{
		send(c, "HTTP/1.1 200 OK\r\n", 17, MSG_NOSIGNAL);
		snprintf(line, sizeof(line), "X-Pad: %01000d\r\n", 0);
		flood(c, line, strlen(line));
	}
	else if (strstr(req, "GET /interim "))
	{
		snprintf(line, sizeof(line), "HTTP/1.1 102 Processing\r\nX-Pad: %0200d\r\n\r\n", 0);
		flood(c, line, strlen(line));
	}
	else if (strstr(req, "GET /trailers "))
	{
		const char *head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n";

		send(c, head, strlen(head), MSG_NOSIGNAL);
		snprintf(line, sizeof(line), "X-Trailer: %01000d\r\n", 0);
		flood(c, line, strlen(line));
	}
	else
		send(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 45, MSG_NOSIGNAL);
}

/* Fork the hostile receiver: a process per connection, 127.0.0.1 only. */
static bool
start_hostile(void)
{
	struct sockaddr_in a;
	socklen_t	alen = sizeof(a);
	int			s = socket(AF_INET, SOCK_STREAM, 0);
	int			one = 1;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (s < 0 || bind(s, (struct sockaddr *) &a, sizeof(a)) != 0 || listen(s, 16) != 0 ||
		getsockname(s, (struct sockaddr *) &a, &alen) != 0)
		return false;
	hostile_port = ntohs(a.sin_port);
	hostile_pid = fork();
	if (hostile_pid < 0)
		return false;
	if (hostile_pid == 0)
	{
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		signal(SIGCHLD, SIG_IGN);
		alarm(300);
		for (;;)
		{
			int			c = accept(s, NULL, NULL);

			if (c < 0)
				continue;
			if (fork() == 0)
			{
				close(s);
				alarm(120);
				serve(c);
				_exit(0);
			}
			close(c);
		}
	}
	close(s);
	atexit(kill_hostile);
	return true;
}

/*
 * One request to path: it must end with an error (not a timeout, not an
 * answer) long before TIMEOUT_MS, having grown memory by little.
 */
static void
check_ends_early(const char *path)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	JfHttpResult *r;
	long		rss0;
	int64_t		start;

	cfg.max_response_bytes = 4096;
	h = make(&cfg);
	rss0 = rss_kb();
	start = mono_ms();
	submit(h, 1, url_at("127.0.0.1", hostile_port, path), "GET", NULL, 0, NULL, TIMEOUT_MS);
	run_until(h, c, 1, TIMEOUT_MS + 10000);
	CHECKF(c->n == 1, "%s: no result", path);
	r = by_id(c, 1);
	CHECKF(r && r->error_kind != JF_HTTP_TIMEOUT && r->error_kind != JF_HTTP_OK,
		   "%s: kind %d, status %d, \"%s\" after %lld ms", path, r ? r->error_kind : -1,
		   r ? r->http_status : -1, r ? r->error : "", (long long) (mono_ms() - start));
	CHECKF(rss_kb() - rss0 < 64 * 1024, "%s: memory grew by %ld kB", path, rss_kb() - rss0);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/*
 * A name that resolves to a denied address and to an allowed one whose
 * port is closed: a connection error, retried like the same port reached
 * by its address alone, whichever address curl tries first.
 */
static void
test_denied_sibling_address(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	int			cp = closed_port();
	char		fix1[64],
				fix2[64],
				allow[64];
	const char *resolve[3] = {fix1, fix2, NULL};
	const char *const hosts[] = {"127.0.0.1", "six-first.test", "four-first.test"};

	snprintf(fix1, sizeof(fix1), "six-first.test:%d:[::1],127.0.0.1", cp);
	snprintf(fix2, sizeof(fix2), "four-first.test:%d:127.0.0.1,[::1]", cp);
	snprintf(allow, sizeof(allow), "127.0.0.1/32:%d", cp);
	cfg.deny_networks = JF_HTTP_DEFAULT_DENY_NETWORKS;
	cfg.allow_networks = allow;
	cfg.resolve = resolve;
	h = make(&cfg);
	for (int i = 0; i < 3; i++)
		submit(h, 10 + i, url_at(hosts[i], cp, "/ok"), "GET", NULL, 0, NULL, 10000);
	run_until(h, c, 3, 15000);
	CHECK(c->n == 3);
	for (int i = 0; i < 3; i++)
	{
		JfHttpResult *r = by_id(c, 10 + i);

		CHECKF(r && r->error_kind == JF_HTTP_CONNECT &&
			   jf_http_result_class(r) == JF_CLASS_CONNECT,
			   "%s: kind %d, class %s, \"%s\"", hosts[i], r ? r->error_kind : -1,
			   r ? jf_http_class_name(jf_http_result_class(r)) : "-", r ? r->error : "");
	}
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/* A receiver answering 200 "ok" to every connection, bound to ip; its port. */
static int
start_plain_at(const char *ip)
{
	struct sockaddr_in a;
	socklen_t	alen = sizeof(a);
	int			s = socket(AF_INET, SOCK_STREAM, 0);
	pid_t		pid;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	if (s < 0 || inet_pton(AF_INET, ip, &a.sin_addr) != 1 ||
		bind(s, (struct sockaddr *) &a, sizeof(a)) != 0 || listen(s, 16) != 0 ||
		getsockname(s, (struct sockaddr *) &a, &alen) != 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0)
	{
		static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(120);
		for (;;)
		{
			int			c = accept(s, NULL, NULL);
			char		buf[4096];

			if (c < 0)
				continue;
			(void) read(c, buf, sizeof(buf));
			(void) write(c, answer, sizeof(answer) - 1);
			close(c);
		}
	}
	close(s);
	return ntohs(a.sin_port);
}

/* One GET of http://ip:port/ under the lists given; its result's kind. */
static int
get_kind(const char *ip, int port, const char *deny, const char *allow)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	JfHttpResult *r;
	int			kind;

	cfg.deny_networks = deny;
	cfg.allow_networks = allow;
	h = make(&cfg);
	submit(h, 1, url_at(ip, port, "/"), "GET", NULL, 0, NULL, 10000);
	run_until(h, c, 1, 15000);
	r = by_id(c, 1);
	kind = r == NULL ? -1 : (r->error_kind == JF_HTTP_OK && r->http_status == 200 ? JF_HTTP_OK :
							 r->error_kind);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
	return kind;
}

/*
 * The decision on curl's numeric addresses (no traffic: a host's own
 * public address cannot be a test's target), then the path on loopback:
 * 127.0.0.2 is answered from 127.0.0.1, so it is not "this host's own"
 * by that rule, and passes when the lists let it.
 */
static void
test_own_host_address(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *def;
	JfHttp	   *open_lo;
	JfHttp	   *allowed;
	int			port;

	cfg.deny_networks = JF_HTTP_DEFAULT_DENY_NETWORKS;
	def = make(&cfg);
	cfg.allow_networks = "192.0.2.2/32";
	allowed = make(&cfg);
	cfg.deny_networks = "10.0.0.0/8";
	cfg.allow_networks = "";
	open_lo = make(&cfg);
	/* a public address of this host: local = remote */
	CHECK(jf_http_own_host_denied(def, "192.0.2.2", "192.0.2.2", 5432));
	CHECK(jf_http_own_host_denied(def, "2001:db8::2", "2001:db8::2", 5432));
	/* another host */
	CHECK(!jf_http_own_host_denied(def, "192.0.2.3", "192.0.2.2", 443));
	/* named by allow_networks, or loopback not denied */
	CHECK(!jf_http_own_host_denied(allowed, "192.0.2.2", "192.0.2.2", 5432));
	CHECK(!jf_http_own_host_denied(open_lo, "192.0.2.2", "192.0.2.2", 5432));
	jf_http_destroy(def);
	jf_http_destroy(allowed);
	jf_http_destroy(open_lo);

	port = start_plain_at("127.0.0.2");
	CHECK(port > 0);
	if (port <= 0)
		return;
	CHECK(get_kind("127.0.0.2", port, "127.0.0.1/32", "") == JF_HTTP_OK);
	CHECK(get_kind("127.0.0.2", port, JF_HTTP_DEFAULT_DENY_NETWORKS, "") == JF_HTTP_INVALID);
}

int
main(void)
{
	if (!harness_start() || !start_hostile())
	{
		unit_failed++;
		return unit_done("test_http_hostile");
	}
	check_ends_early("/headers");
	check_ends_early("/interim");
	check_ends_early("/trailers");
	test_denied_sibling_address();
	test_own_host_address();
	kill_hostile();
	harness_stop();
	return unit_done("test_http_hostile");
}
