/*-------------------------------------------------------------------------
 *
 * sockets.c
 *	  Which socket is each kept HTTP/1 connection's, and whether its server
 *	  has already closed it.
 *
 * A receiver closes idle keep-alive connections on its own schedule (an
 * idle timeout, a restart).  libcurl checks a pooled connection before it
 * reuses it, but the check of some versions misses a closed TLS
 * connection: the server's close_notify alert, which arrives before its
 * FIN, reads as "still alive" (libcurl 7.88's OpenSSL check peeks one byte
 * and sees the alert).  The request then goes out on a dead connection,
 * gets no answer, and may have been delivered for all anyone can tell:
 * an attempt spent.
 *
 * So the dispatcher looks for itself, right before the first request goes
 * out on a reused connection (request.c's prereq_cb): an idle HTTP/1
 * connection has nothing legitimate to read, so any input, end of stream
 * or error already waiting there means the server closed or reset it
 * before a byte of ours existed.  That request is provably unsent; it is
 * restarted at once on another connection instead of becoming an attempt.
 *
 * curl gives the pre-request callback the connection's addresses and
 * ports but not its socket, which it reports only when a transfer ends
 * (CURLINFO_ACTIVESOCKET).  This table keeps, for each connection kept
 * after a transfer, its socket under its local and remote ports; entries
 * go when curl closes the socket (through our close callback).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/internal.h"
#include "core/hash.h"

#define JF_SOCKETS_MIN_CAP	64

struct JfSocketEntry
{
	int			fd;				/* -1: empty slot */
	uint32_t	key;			/* local port << 16 | remote port */
};

static uint32_t
ports_key(int local_port, int remote_port)
{
	return ((uint32_t) (local_port & 0xffff) << 16) | (uint32_t) (remote_port & 0xffff);
}

/* The ports of a connected socket; false if it has none (yet). */
static bool
socket_ports(int fd, uint32_t *key)
{
	struct sockaddr_storage local,
				remote;
	socklen_t	llen = sizeof(local),
				rlen = sizeof(remote);
	int			lport,
				rport;

	if (getsockname(fd, (struct sockaddr *) &local, &llen) != 0 ||
		getpeername(fd, (struct sockaddr *) &remote, &rlen) != 0)
		return false;
	if (local.ss_family == AF_INET && remote.ss_family == AF_INET)
	{
		lport = ntohs(((struct sockaddr_in *) &local)->sin_port);
		rport = ntohs(((struct sockaddr_in *) &remote)->sin_port);
	}
	else if (local.ss_family == AF_INET6 && remote.ss_family == AF_INET6)
	{
		lport = ntohs(((struct sockaddr_in6 *) &local)->sin6_port);
		rport = ntohs(((struct sockaddr_in6 *) &remote)->sin6_port);
	}
	else
		return false;
	*key = ports_key(lport, rport);
	return true;
}

/* Linear probing: the slot holding key, or the empty one where it would go. */
static size_t
slot_of(const JfHttp *h, uint32_t key)
{
	size_t		mask = h->sockets_cap - 1;
	size_t		i = jf_hash64(key) & mask;

	while (h->sockets[i].fd >= 0 && h->sockets[i].key != key)
		i = (i + 1) & mask;
	return i;
}

/* Doubling keeps probes short; on OOM the table just stays as it is. */
static bool
grow(JfHttp *h)
{
	size_t		ncap = h->sockets_cap ? h->sockets_cap * 2 : JF_SOCKETS_MIN_CAP;
	JfSocketEntry *old = h->sockets;
	size_t		ocap = h->sockets_cap;
	JfSocketEntry *n = malloc(ncap * sizeof(JfSocketEntry));

	if (n == NULL)
		return false;
	for (size_t i = 0; i < ncap; i++)
		n[i].fd = -1;
	h->sockets = n;
	h->sockets_cap = ncap;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].fd >= 0)
			h->sockets[slot_of(h, old[i].key)] = old[i];
	free(old);
	return true;
}

/*
 * Backward-shift deletion: later entries of the same probe run move up,
 * so lookups never need tombstones.
 */
static void
remove_at(JfHttp *h, size_t i)
{
	size_t		mask = h->sockets_cap - 1;
	size_t		j = i;

	h->sockets[i].fd = -1;
	h->nsockets--;
	for (;;)
	{
		size_t		home;

		j = (j + 1) & mask;
		if (h->sockets[j].fd < 0)
			return;
		home = jf_hash64(h->sockets[j].key) & mask;
		/* the entry at j may fill the hole at i unless its home lies in (i, j] */
		if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j)))
		{
			h->sockets[i] = h->sockets[j];
			h->sockets[j].fd = -1;
			i = j;
		}
	}
}

/*
 * A transfer ended and curl kept its connection: remember its socket if
 * it speaks HTTP/1 (an idle HTTP/2 connection may well have frames
 * waiting, and curl reads those itself).
 */
void
jf_http_sockets_kept(JfHttp *h, CURL *e)
{
	curl_socket_t fd = CURL_SOCKET_BAD;
	long		version = 0;
	long		lport = 0,
				rport = 0;
	size_t		i;

	if (curl_easy_getinfo(e, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK ||
		fd == CURL_SOCKET_BAD ||
		curl_easy_getinfo(e, CURLINFO_LOCAL_PORT, &lport) != CURLE_OK ||
		curl_easy_getinfo(e, CURLINFO_PRIMARY_PORT, &rport) != CURLE_OK)
		return;
	(void) curl_easy_getinfo(e, CURLINFO_HTTP_VERSION, &version);
	if (h->sockets_cap == 0 && !grow(h))
		return;
	i = slot_of(h, ports_key((int) lport, (int) rport));
	if (version != CURL_HTTP_VERSION_1_0 && version != CURL_HTTP_VERSION_1_1)
	{
		if (h->sockets[i].fd >= 0)
			remove_at(h, i);
		return;
	}
	if (h->sockets[i].fd < 0)
	{
		if ((h->nsockets + 1) * 2 > h->sockets_cap)
		{
			if (!grow(h))
				return;
			i = slot_of(h, ports_key((int) lport, (int) rport));
		}
		h->nsockets++;
	}
	h->sockets[i].fd = fd;
	h->sockets[i].key = ports_key((int) lport, (int) rport);
}

/*
 * curl's close of any socket of ours (CURLOPT_CLOSESOCKETFUNCTION, set with
 * the dispatcher as its argument: it outlives every request): the table
 * forgets it, so a later socket with the same number is never mistaken for
 * it.
 */
int
jf_http_sockets_close_cb(void *clientp, curl_socket_t fd)
{
	JfHttp	   *h = clientp;
	uint32_t	key;

	if (h->nsockets > 0 && socket_ports(fd, &key))
	{
		size_t		i = slot_of(h, key);

		if (h->sockets[i].fd == fd)
			remove_at(h, i);
	}
	return close(fd);
}

/*
 * Whether the kept connection with these ports has input, an end of stream
 * or an error waiting: then its server closed (or reset) it while it was
 * idle, and nothing sent on it now could be answered.  False when unknown.
 */
bool
jf_http_sockets_closed_by_peer(const JfHttp *h, int local_port, int remote_port)
{
	struct pollfd pfd;
	size_t		i;

	if (h->nsockets == 0)
		return false;
	i = slot_of(h, ports_key(local_port, remote_port));
	if (h->sockets[i].fd < 0)
		return false;
	pfd.fd = h->sockets[i].fd;
	/* a FIN reads as input too (end of stream), a reset as an error */
	pfd.events = POLLIN;
	pfd.revents = 0;
	if (poll(&pfd, 1, 0) != 1)
		return false;
	return (pfd.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

void
jf_http_sockets_destroy(JfHttp *h)
{
	free(h->sockets);
	h->sockets = NULL;
	h->sockets_cap = 0;
	h->nsockets = 0;
}
