/*-------------------------------------------------------------------------
 *
 * sockets.c
 *	  Which socket is each idle kept connection's, and whether its server
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
 * An idle HTTP/2 connection is judged the same way when a stream is about
 * to open on it: a server going away sends GOAWAY (and then closes), and
 * while curl has not read it, a new stream would go out into a closing
 * connection.  The rare frame that is no farewell (a PING, new SETTINGS)
 * costs one new connection, never an attempt.  Once a stream is open the
 * connection is in use, and input is its answers: it leaves the table
 * until it is idle again.
 *
 * curl gives the pre-request callback the connection's addresses and
 * ports but not its socket, which it reports only when a transfer ends
 * and leaves the connection idle in the pool (CURLINFO_ACTIVESOCKET; not
 * while other streams still use it).  This table keeps, for each such
 * connection, its socket under its four addresses and ports: the
 * ports alone do not tell connections apart (the kernel gives one local
 * port to connections to different peers), and a tenant's receiver must
 * never stand for another's.  Entries go when curl closes the socket
 * (through our close callback), found by the socket's number: a socket
 * that its peer reset has no peer address to look it up by any more.  A
 * number that comes back under another connection replaces its old entry
 * (curl closes some sockets without our callback, e.g. its DNS-over-HTTPS
 * transfers').
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "http/internal.h"
#include "core/hash.h"

#define JF_SOCKETS_MIN_CAP	64

/* A connection's two ends, as curl reports them (address strings parsed) */
typedef struct JfSocketTuple
{
	bool		used;			/* the socket of this number is in the table */
	uint8_t		family;			/* AF_INET or AF_INET6 */
	uint16_t	local_port;
	uint16_t	remote_port;
	uint8_t		local_addr[16];
	uint8_t		remote_addr[16];
	bool		multiplexed;	/* HTTP/2 */
} JfSocketTuple;

/* A slot of the hash table; its key is the tuple of its socket's number. */
struct JfSocketEntry
{
	int			fd;				/* -1: empty slot */
};

/* The tuple of curl's address strings and ports; false if they do not parse. */
static bool
parse_tuple(const char *local_ip, int local_port, const char *remote_ip, int remote_port,
			JfSocketTuple *t)
{
	memset(t, 0, sizeof(*t));
	if (local_ip == NULL || remote_ip == NULL)
		return false;
	if (inet_pton(AF_INET, local_ip, t->local_addr) == 1 &&
		inet_pton(AF_INET, remote_ip, t->remote_addr) == 1)
		t->family = AF_INET;
	else if (inet_pton(AF_INET6, local_ip, t->local_addr) == 1 &&
			 inet_pton(AF_INET6, remote_ip, t->remote_addr) == 1)
		t->family = AF_INET6;
	else
		return false;
	t->local_port = (uint16_t) local_port;
	t->remote_port = (uint16_t) remote_port;
	return true;
}

static bool
same_tuple(const JfSocketTuple *a, const JfSocketTuple *b)
{
	return a->family == b->family &&
		a->local_port == b->local_port && a->remote_port == b->remote_port &&
		memcmp(a->local_addr, b->local_addr, 16) == 0 &&
		memcmp(a->remote_addr, b->remote_addr, 16) == 0;
}

static uint32_t
tuple_hash(const JfSocketTuple *t)
{
	uint64_t	x = ((uint64_t) t->family << 32) |
		((uint64_t) t->local_port << 16) | t->remote_port;

	for (int i = 0; i < 16; i += 8)
	{
		uint64_t	l,
					r;

		memcpy(&l, t->local_addr + i, 8);
		memcpy(&r, t->remote_addr + i, 8);
		x = (x ^ jf_hash64(l)) * UINT64_C(0x9e3779b97f4a7c15);
		x = (x ^ jf_hash64(r)) * UINT64_C(0x9e3779b97f4a7c15);
	}
	return jf_hash64(x);
}

/* Linear probing: the slot holding tuple t, or the empty one where it would go. */
static size_t
slot_of(const JfHttp *h, const JfSocketTuple *t)
{
	size_t		mask = h->sockets_cap - 1;
	size_t		i = tuple_hash(t) & mask;

	while (h->sockets[i].fd >= 0 && !same_tuple(&h->socket_tuples[h->sockets[i].fd], t))
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
			h->sockets[slot_of(h, &h->socket_tuples[old[i].fd])] = old[i];
	free(old);
	return true;
}

/* Room for the tuple of socket number fd; false on OOM. */
static bool
tuples_reserve(JfHttp *h, int fd)
{
	size_t		ncap = h->socket_tuples_cap ? h->socket_tuples_cap : JF_SOCKETS_MIN_CAP;
	JfSocketTuple *n;

	if ((size_t) fd < h->socket_tuples_cap)
		return true;
	while (ncap <= (size_t) fd)
		ncap *= 2;
	n = realloc(h->socket_tuples, ncap * sizeof(JfSocketTuple));
	if (n == NULL)
		return false;
	memset(n + h->socket_tuples_cap, 0,
		   (ncap - h->socket_tuples_cap) * sizeof(JfSocketTuple));
	h->socket_tuples = n;
	h->socket_tuples_cap = ncap;
	return true;
}

/*
 * Backward-shift deletion: later entries of the same probe run move up,
 * so lookups never need tombstones.  The removed socket's tuple is still
 * marked used here; the caller clears it.
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
		home = tuple_hash(&h->socket_tuples[h->sockets[j].fd]) & mask;
		/* the entry at j may fill the hole at i unless its home lies in (i, j] */
		if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j)))
		{
			h->sockets[i] = h->sockets[j];
			h->sockets[j].fd = -1;
			i = j;
		}
	}
}

/* Forget socket number fd, if the table has it. */
static void
forget_fd(JfHttp *h, int fd)
{
	JfSocketTuple *t;
	size_t		i;

	if (fd < 0 || (size_t) fd >= h->socket_tuples_cap || !h->socket_tuples[fd].used)
		return;
	t = &h->socket_tuples[fd];
	i = slot_of(h, t);
	if (h->sockets[i].fd == fd)
		remove_at(h, i);
	t->used = false;
}

/*
 * A transfer ended and curl kept its connection, idle: remember its socket.
 */
void
jf_http_sockets_kept(JfHttp *h, CURL *e)
{
	curl_socket_t fd = CURL_SOCKET_BAD;
	long		version = 0;
	long		lport = 0,
				rport = 0;
	char	   *lip = NULL,
			   *rip = NULL;
	JfSocketTuple t;
	size_t		i;

	if (curl_easy_getinfo(e, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK ||
		fd == CURL_SOCKET_BAD || fd < 0)
		return;
	/* whatever the number stood for before, it is this connection now */
	forget_fd(h, fd);
	if (curl_easy_getinfo(e, CURLINFO_LOCAL_PORT, &lport) != CURLE_OK ||
		curl_easy_getinfo(e, CURLINFO_PRIMARY_PORT, &rport) != CURLE_OK ||
		curl_easy_getinfo(e, CURLINFO_LOCAL_IP, &lip) != CURLE_OK ||
		curl_easy_getinfo(e, CURLINFO_PRIMARY_IP, &rip) != CURLE_OK ||
		!parse_tuple(lip, (int) lport, rip, (int) rport, &t))
		return;
	(void) curl_easy_getinfo(e, CURLINFO_HTTP_VERSION, &version);
	if (h->sockets_cap == 0 && !grow(h))
		return;
	/* another number under the same ends was closed without our callback */
	i = slot_of(h, &t);
	if (h->sockets[i].fd >= 0)
	{
		h->socket_tuples[h->sockets[i].fd].used = false;
		remove_at(h, i);
	}
	t.multiplexed = version != CURL_HTTP_VERSION_1_0 && version != CURL_HTTP_VERSION_1_1;
	if (!tuples_reserve(h, fd))
		return;
	if ((h->nsockets + 1) * 2 > h->sockets_cap && !grow(h))
		return;
	t.used = true;
	h->socket_tuples[fd] = t;
	i = slot_of(h, &t);
	h->sockets[i].fd = fd;
	h->nsockets++;
}

/*
 * curl is closing socket fd (request.c's close callback): a later socket
 * with the same number must never be mistaken for it.
 */
void
jf_http_sockets_forget(JfHttp *h, curl_socket_t fd)
{
	forget_fd(h, fd);
}

/*
 * Whether the idle kept connection with these ends has input, an end of
 * stream or an error waiting: then its server closed (or reset) it, or is
 * closing it, while it was idle, and nothing sent on it now could be
 * answered.  False when unknown.  *multiplexed tells an HTTP/2 connection,
 * which is in use from now on (and which curl does not close when the
 * request is stopped: the caller must ask for a fresh connection).
 */
bool
jf_http_sockets_closed_by_peer(JfHttp *h, const char *local_ip, int local_port,
							   const char *remote_ip, int remote_port,
							   bool *multiplexed)
{
	JfSocketTuple t;
	struct pollfd pfd;
	size_t		i;

	*multiplexed = false;
	if (h->nsockets == 0 ||
		!parse_tuple(local_ip, local_port, remote_ip, remote_port, &t))
		return false;
	i = slot_of(h, &t);
	if (h->sockets[i].fd < 0)
		return false;
	pfd.fd = h->sockets[i].fd;
	if (h->socket_tuples[pfd.fd].multiplexed)
	{
		*multiplexed = true;
		forget_fd(h, pfd.fd);
	}
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
	free(h->socket_tuples);
	h->sockets = NULL;
	h->socket_tuples = NULL;
	h->sockets_cap = 0;
	h->socket_tuples_cap = 0;
	h->nsockets = 0;
}
