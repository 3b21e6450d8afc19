/*-------------------------------------------------------------------------
 *
 * test_http_fds.c
 *	  The epoll mirror's table of descriptors (http.c's sock_cb, request.c's
 *	  socket callbacks): what it says of a number must hold for the file
 *	  that number names now.
 *
 * curl closes some sockets that open_socket_cb made without calling
 * close_socket_cb: a connection attempt still in progress when its
 * transfer ends (a timeout while connecting, the loser of a happy-eyeballs
 * race) is closed with a plain close() (curl 7.88's cf_socket_close,
 * "not active").  If the table still calls that number JF_FD_OURS, the
 * next file of the number that is no connection of ours (the threaded
 * resolver's socketpair, a DNS-over-HTTPS connection) is kept in the
 * epoll set when curl drops it, then closed there; and the one after it
 * with the same interest is then taken for registered and never added.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/internal.h"
#include "http_harness.h"
#include "unit.h"

/*
 * A loopback listener whose accept queue is full: connects to it stay in
 * SYN_SENT (the kernel drops their SYNs) until the caller gives up.
 */
static int	bh_listener = -1;
static int	bh_filler = -1;

static int
blackhole_start(void)
{
	struct sockaddr_in sa;
	socklen_t	sl = sizeof(sa);

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bh_listener = socket(AF_INET, SOCK_STREAM, 0);
	if (bh_listener < 0 || bind(bh_listener, (struct sockaddr *) &sa, sizeof(sa)) != 0 ||
		listen(bh_listener, 0) != 0 ||
		getsockname(bh_listener, (struct sockaddr *) &sa, &sl) != 0)
		return -1;
	/* the one connection a backlog of 0 admits, never accepted */
	bh_filler = socket(AF_INET, SOCK_STREAM, 0);
	if (bh_filler < 0 || connect(bh_filler, (struct sockaddr *) &sa, sizeof(sa)) != 0)
		return -1;
	return ntohs(sa.sin_port);
}

static void
blackhole_stop(void)
{
	close(bh_filler);
	close(bh_listener);
}

/* Descriptors the table marks although no file has that number any more. */
static int
stale_entries(const JfHttp *h, uint8_t mask)
{
	int			n = 0;

	for (int fd = 0; fd < h->nfds; fd++)
		if ((h->fds[fd] & mask) && fcntl(fd, F_GETFD) < 0 && errno == EBADF)
		{
			printf("test_http_fds: fd %d closed, table says 0x%02x\n", fd, h->fds[fd]);
			n++;
		}
	return n;
}

/*
 * A name other than localhost (which curl answers itself) that the hosts
 * file maps to 127.0.0.1, so that curl's threaded resolver runs without
 * any DNS server; NULL if there is none.
 */
static const char *
hosts_file_name(void)
{
	static char name[256];
	char		line[512];
	FILE	   *f = fopen("/etc/hosts", "r");

	if (f == NULL)
		return NULL;
	while (fgets(line, sizeof(line), f))
	{
		char	   *save = NULL;
		char	   *addr = strtok_r(line, " \t\n", &save);
		char	   *n;

		if (addr == NULL || addr[0] == '#' || strcmp(addr, "127.0.0.1") != 0)
			continue;
		while ((n = strtok_r(NULL, " \t\n", &save)) != NULL)
		{
			if (n[0] == '#')
				break;
			if (strcasecmp(n, "localhost") != 0 && strchr(n, '.') == NULL &&
				strlen(n) < sizeof(name))
			{
				snprintf(name, sizeof(name), "%s", n);
				fclose(f);
				return name;
			}
		}
	}
	fclose(f);
	return NULL;
}

/*
 * A transfer that times out while connecting: curl closes the socket
 * without our close callback, so the table must not keep calling the
 * number ours (nor registered).
 */
static void
test_connect_timeout_forgotten(void)
{
	JfHttpConfig c = default_config();
	JfHttp	   *h = make(&c);
	Collected	col = {0};
	int			bh = blackhole_start();
	char		u[64];

	CHECK(bh > 0);
	snprintf(u, sizeof(u), "http://127.0.0.1:%d/", bh);
	CHECK(submit(h, 1, u, "GET", NULL, 0, NULL, 300));
	run_until(h, &col, 1, 5000);
	CHECK(col.n == 1 && col.r[0].error_kind == JF_HTTP_TIMEOUT);
	CHECKF(stale_entries(h, JF_FD_OURS | JF_FD_REG) == 0,
		   "the table marks closed descriptors");
	collected_free(&col);
	jf_http_destroy(h);
	blackhole_stop();
}

/*
 * The consequence: after a timed-out connect, a lookup whose socketpair
 * takes that number is kept in the epoll set (and closed there); the next
 * lookup on the same number is never registered, so its answer is seen
 * only at curl's next poll of the resolver (a backoff up to 250 ms), not
 * when it arrives.  Needs a name the hosts file maps to 127.0.0.1.
 */
static void
test_lookup_after_connect_timeout(void)
{
	const char *name = hosts_file_name();
	int			cp = closed_port();
	char		deny[64],
				u[300];
	JfHttpConfig c = default_config();
	JfHttp	   *h;
	Collected	col = {0};
	int			bh;
	JfHttpResult *r;

	if (name == NULL)
	{
		printf("test_http_fds: no name in /etc/hosts for 127.0.0.1, lookup test skipped\n");
		return;
	}
	/* a request to cp is refused before any socket exists */
	snprintf(deny, sizeof(deny), "127.0.0.1/32:%d", cp);
	c.deny_networks = deny;
	h = make(&c);
	bh = blackhole_start();
	CHECK(bh > 0);
	snprintf(u, sizeof(u), "http://127.0.0.1:%d/", bh);
	CHECK(submit(h, 1, u, "GET", NULL, 0, NULL, 300));
	run_until(h, &col, 1, 5000);
	/* a lookup, then no connection: its socketpair's number stays free */
	snprintf(u, sizeof(u), "http://%s:%d/", name, cp);
	CHECK(submit(h, 2, u, "GET", NULL, 0, NULL, 3000));
	run_until(h, &col, 2, 5000);
	CHECKF(stale_entries(h, JF_FD_REG) == 0,
		   "a lookup's closed socketpair is taken for registered");
	/* another tenant's request, to a name not looked up yet for this port */
	snprintf(u, sizeof(u), "http://%s:%d/ok", name, port);
	CHECK(submit(h, 3, u, "GET", NULL, 0, NULL, 3000));
	run_until(h, &col, 3, 5000);
	r = by_id(&col, 3);
	CHECKF(r != NULL && r->http_status == 200,
		   "the third request failed: %s", r ? r->error : "no result");
	collected_free(&col);
	jf_http_destroy(h);
	blackhole_stop();
}

int
main(void)
{
	if (!harness_start())
		return 1;
	test_connect_timeout_forgotten();
	test_lookup_after_connect_timeout();
	harness_stop();
	return unit_done("test_http_fds");
}
