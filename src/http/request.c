/*-------------------------------------------------------------------------
 *
 * request.c
 *	  One request of jobflow's HTTP dispatcher, from submission to result.
 *
 * A submitted request is copied and checked here (method, headers, URL;
 * the host key used for admission is derived from the URL), its easy
 * handle is set up when it starts, curl's data callbacks fill in its
 * result, and when it ends it moves to the dispatcher's result FIFO.
 *
 * Before each request goes out, on a new or a reused connection, a
 * pre-request callback checks the connection's address again, refuses
 * libcurl's own re-sends of a request that got no answer, and keeps
 * redirects within the task's origin (prereq_cb).
 *
 * The result lives inside the request struct, so finishing needs no
 * allocation and cannot be lost to OOM.  Easy handles are recycled
 * through a small pool.  URL credentials are kept only to scrub them from
 * error texts, which never hold the URL.
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/internal.h"
#include "core/hash.h"

#define JF_RETRY_AFTER_MAX_S	(365LL * 24 * 3600)

static const char *const jf_methods[] = {
	"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"
};

/* ---------------------------------------------------------------------
 * Requests and results
 * ---------------------------------------------------------------------
 */

/*
 * with_result_body is false once the result has been handed to the caller,
 * who then owns its body.
 */
void
jf_http_req_free(JfReq *r, bool with_result_body)
{
	free(r->url);
	curl_url_cleanup(r->uh);
	free(r->origin);
	curl_slist_free_all(r->headers);
	curl_slist_free_all(r->own_headers);
	free(r->body);
	free(r->secret_user);
	free(r->secret_pass);
	free(r->client_cert);
	if (r->client_key)
	{
		/* the key outlives its request in no memory of ours */
		explicit_bzero(r->client_key, r->client_key_len);
		free(r->client_key);
	}
	if (with_result_body)
		free(r->res.body);
	free(r);
}

/* Results come out in the order requests finished. */
void
jf_http_req_done(JfHttp *h, JfReq *r)
{
	r->next = NULL;
	if (h->done_tail)
		h->done_tail->next = r;
	else
		h->done_head = r;
	h->done_tail = r;
}

/* Remove every occurrence of secret from s, replacing it with "***". */
static void
scrub(char *s, const char *secret)
{
	size_t		slen;
	char	   *p;

	if (secret == NULL || *secret == '\0')
		return;
	slen = strlen(secret);
	while ((p = strstr(s, secret)) != NULL)
	{
		memmove(p + 3, p + slen, strlen(p + slen) + 1);
		memcpy(p, "***", 3);
		if (slen < 3)
			break;				/* cannot loop on our own "***" then */
	}
}

/*
 * Error texts come from curl and may quote the URL, credentials included:
 * those never reach the result, which ends up in a table.
 */
void
jf_http_req_set_error(JfReq *r, int kind, const char *msg)
{
	r->res.error_kind = kind;
	snprintf(r->res.error, sizeof(r->res.error), "%s", msg);
	scrub(r->res.error, r->secret_user);
	scrub(r->res.error, r->secret_pass);
}

/*
 * Reusing an easy handle saves its allocation and, while the configuration
 * stays, the setting of every option that is the same for all requests
 * (jf_http_req_start).  What pointed into the finished request goes, and
 * so does libcurl's work URL: before 8.12, setting only CURLOPT_CURLU
 * leaves it at the first transfer's URL (CURLINFO_EFFECTIVE_URL, the URL
 * curl names for its own re-sends).
 *
 * A handle whose transfer did not end well (ok is false) is reset instead:
 * libcurl counts its silent re-sends of a request on a connection found
 * dead per handle, and only curl_easy_reset() sets the count back; kept,
 * five of them over any requests (whoever's) would make curl give up on
 * the next such connection without a word that it may have been delivered.
 * A reset handle is configured again when next taken, as a new one is.
 */
static void
recycle_easy(JfHttp *h, CURL *e, uint32_t gen, bool ok)
{
	if (h->npool >= JF_EASY_POOL_MAX)
		curl_easy_cleanup(e);
	else if (!ok)
	{
		curl_easy_reset(e);
		h->pool_gen[h->npool] = 0;
		h->pool[h->npool++] = e;
	}
	else if (curl_easy_setopt(e, CURLOPT_CURLU, (CURLU *) NULL) == CURLE_OK &&
			 curl_easy_setopt(e, CURLOPT_URL, (char *) NULL) == CURLE_OK &&
			 curl_easy_setopt(e, CURLOPT_ERRORBUFFER, (char *) NULL) == CURLE_OK &&
			 curl_easy_setopt(e, CURLOPT_PRIVATE, (void *) NULL) == CURLE_OK)
	{
		h->pool_gen[h->npool] = gen;
		h->pool[h->npool++] = e;
	}
	else
		curl_easy_cleanup(e);
}

/* Take a started request's transfer out of curl; its handle is recycled. */
static void
detach_easy(JfHttp *h, JfReq *r)
{
	/* unlink from the active list */
	if (r->prev)
		r->prev->next = r->next;
	else
		h->active = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = NULL;
	h->nactive--;
	curl_multi_remove_handle(h->multi, r->easy);
	recycle_easy(h, r->easy, r->easy_gen, r->easy_ok);
	r->easy = NULL;
}

/*
 * Move a started (or failed-to-start) request to the result FIFO, freeing
 * its host slot.  Callers start queued requests afterwards.
 */
static void
finish_req(JfHttp *h, JfReq *r)
{
	if (r->easy)
		detach_easy(h, r);
	jf_http_queue_release(h, r);
	if (r->res.body)
		r->res.body[r->res.body_len] = '\0';
	r->res.finished_at_ms = jf_http_now_wall_ms();
	/* drop what only the transfer needed */
	curl_url_cleanup(r->uh);
	r->uh = NULL;
	free(r->body);
	r->body = NULL;
	curl_slist_free_all(r->headers);
	r->headers = NULL;
	curl_slist_free_all(r->own_headers);
	r->own_headers = NULL;
	jf_http_req_done(h, r);
}

/*
 * The flags of descriptor s, growing the table to hold it; NULL only on
 * OOM (or a negative descriptor), and then http.c's sock_cb works
 * untracked.
 */
uint8_t *
jf_http_fd_flags(JfHttp *h, curl_socket_t s)
{
	if (s < 0)
		return NULL;
	if (s >= h->nfds)
	{
		int			n = h->nfds ? h->nfds : 64;
		uint8_t    *nf;

		while (n <= s)
			n *= 2;
		nf = realloc(h->fds, n);
		if (nf == NULL)
			return NULL;
		memset(nf + h->nfds, 0, n - h->nfds);
		h->fds = nf;
		h->nfds = n;
	}
	return &h->fds[s];
}

/*
 * A socket open_socket_cb has just created: whatever the table said of
 * its number belonged to a closed file, which left the epoll set when it
 * was closed.
 */
static void
socket_opened(JfHttp *h, curl_socket_t s)
{
	uint8_t    *f = jf_http_fd_flags(h, s);

	if (f)
		*f = JF_FD_OURS;
}

/*
 * curl closes the sockets of its connections here (CURLOPT_CLOSESOCKET-
 * FUNCTION), so that a socket kept in the epoll set while idle is known to
 * be gone, and its number free for another file; and so that the table of
 * idle connections (sockets.c) never mistakes a later socket of the same
 * number for it.
 */
static int
close_socket_cb(void *clientp, curl_socket_t s)
{
	JfHttp	   *h = clientp;

	if (s >= 0 && s < h->nfds)
	{
		/*
		 * The kernel drops a registration at the file's last close only;
		 * taken out first, it can never outlive the number.
		 */
		if (h->fds[s] & JF_FD_REG)
			epoll_ctl(h->epfd, EPOLL_CTL_DEL, s, NULL);
		h->fds[s] = 0;
	}
	jf_http_sockets_forget(h, s);
	return close(s);
}

static char *url_origin(const char *url);

/*
 * Whether a request that presents a client certificate is about to
 * connect to another origin than its own (a redirect hop): the
 * certificate is bound to origins, and the handshake that would present
 * it comes before prereq_cb could refuse the hop.
 */
static bool
certificate_leaves_origin(JfReq *r)
{
	char	   *where = NULL;
	char	   *origin;
	bool		same;

	if (r->client_cert == NULL || r->sends == 0)
		return false;
	if (curl_easy_getinfo(r->easy, CURLINFO_EFFECTIVE_URL, &where) != CURLE_OK || where == NULL)
		return true;
	origin = url_origin(where);
	same = origin != NULL && strcmp(origin, r->origin) == 0;
	free(origin);
	return !same;
}

/*
 * Every connection curl opens passes here, after DNS and for each redirect
 * hop, so a host name that resolves to a denied address is refused too,
 * before a socket exists: nothing is sent there.  So is a redirect hop to
 * another origin of a request with a client certificate.
 */
static curl_socket_t
open_socket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *address)
{
	JfReq	   *r = clientp;
	curl_socket_t s;

	if (purpose == CURLSOCKTYPE_IPCXN && certificate_leaves_origin(r))
	{
		r->refused = JF_REFUSED_CROSS_ORIGIN_CERT;
		return CURL_SOCKET_BAD;
	}

	if (purpose == CURLSOCKTYPE_IPCXN && jf_http_sockaddr_denied(r->http, &address->addr))
	{
		r->denied = true;
		return CURL_SOCKET_BAD;
	}
	/* a name with a denied and an allowed address fails as a connection */
	if (purpose == CURLSOCKTYPE_IPCXN)
		r->tried_allowed = true;
	s = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
	if (s != CURL_SOCKET_BAD)
		socket_opened(r->http, s);
	return s;
}

/*
 * The origin (lower-case scheme://host:port, default port filled in) of
 * url, malloc'd; NULL if it does not parse or on OOM.
 */
static char *
url_origin(const char *url)
{
	CURLU	   *u = curl_url();
	char	   *scheme = NULL,
			   *host = NULL,
			   *port = NULL,
			   *key = NULL;

	if (u != NULL && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK)
	{
		size_t		len = strlen(scheme) + strlen(host) + strlen(port) + 5;

		key = malloc(len);
		if (key != NULL)
		{
			snprintf(key, len, "%s://%s:%s", scheme, host, port);
			for (char *p = key; *p; p++)
				if (*p >= 'A' && *p <= 'Z')
					*p += 'a' - 'A';
		}
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return key;
}

/*
 * name followed by v in decimal, into line (64 bytes are plenty): the
 * same text as snprintf's "%" PRId64, at a fraction of its cost, since
 * every request formats two of these.
 */
static void
header_with_number(char *line, const char *name, int64_t v)
{
	char		digits[24];
	int			n = 0;
	uint64_t	u = v < 0 ? -(uint64_t) v : (uint64_t) v;
	size_t		len = strlen(name);

	memcpy(line, name, len);
	do
	{
		digits[n++] = (char) ('0' + u % 10);
		u /= 10;
	} while (u > 0);
	if (v < 0)
		line[len++] = '-';
	while (n > 0)
		line[len++] = digits[--n];
	line[len] = '\0';
}

/*
 * jobflow's own headers alone, for a hop to another origin: built only
 * then, since few requests ever need them.  false on OOM.
 */
static bool
build_own_headers(JfReq *r)
{
	char		line[64];

	if (r->own_headers)
		return true;
	for (int i = 0; i < 3; i++)
	{
		struct curl_slist *n;

		if (i == 0)
			header_with_number(line, "X-Jobflow-Task-Id: ", r->res.task_id);
		else if (i == 1)
			header_with_number(line, "X-Jobflow-Attempt: ", r->res.attempt);
		else
			strcpy(line, "Expect:");
		if ((n = curl_slist_append(r->own_headers, line)) == NULL)
		{
			curl_slist_free_all(r->own_headers);
			r->own_headers = NULL;
			return false;
		}
		r->own_headers = n;
	}
	return true;
}

/*
 * A redirect hop is about to be sent: refuse it if it leaves the task's
 * origin, unless allowed; then only jobflow's own headers go along, and
 * a task with a body is not redirected at all (a 307/308 would re-send
 * it).  Swapping the header list here works because curl reads it when
 * it builds the request, right after this callback.
 */
static bool
follow_allowed(JfReq *r)
{
	char	   *where = NULL;
	char	   *origin;
	bool		same;

	if (curl_easy_getinfo(r->easy, CURLINFO_EFFECTIVE_URL, &where) != CURLE_OK || where == NULL)
		return false;
	origin = url_origin(where);
	if (origin == NULL)
		return false;
	same = strcmp(origin, r->origin) == 0;
	free(origin);
	if (same)
		return true;
	if (!r->http->follow_cross_origin)
	{
		r->refused = JF_REFUSED_CROSS_ORIGIN;
		return false;
	}
	if (r->body_len > 0)
	{
		r->refused = JF_REFUSED_CROSS_ORIGIN_BODY;
		return false;
	}
	if (!build_own_headers(r) ||
		curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->own_headers) != CURLE_OK)
		return false;
	return true;
}

/*
 * Whether the transfer's first request is about to go out on a pooled
 * connection that its server has already closed.  A connection made for
 * this transfer (CURLINFO_NUM_CONNECTS counts those) is fresh.
 */
static bool
connection_closed_by_peer(JfReq *r, const char *local_ip, int local_port,
						  const char *remote_ip, int remote_port)
{
	long		connects = 0;
	bool		multiplexed;

	if (curl_easy_getinfo(r->easy, CURLINFO_NUM_CONNECTS, &connects) != CURLE_OK ||
		connects > 0)
		return false;
	if (!jf_http_sockets_closed_by_peer(r->http, local_ip, local_port,
										remote_ip, remote_port, &multiplexed))
		return false;
	/* curl keeps an HTTP/2 connection when a stream on it stops */
	if (multiplexed)
		r->fresh = true;
	return true;
}

/*
 * Called by curl right before each request goes out on a connection, new
 * or reused, for the first request, each redirect hop and each of curl's
 * own re-sends.  Four checks need that moment:
 *
 * - the connection's address and port against the address lists, since
 *   a reused connection never passes through open_socket_cb (a reload may
 *   have denied it, or taken away what allowed it, meanwhile);
 * - the first request of a transfer on a reused connection that its
 *   server closed while it was idle is stopped before a byte goes out,
 *   and started again on another connection (sockets.c);
 * - curl re-sends a request, on a fresh connection, when a reused one
 *   closed without a byte of answer (Curl_retry_request, up to 5 times):
 *   the server may well have got it, so such a re-send is refused and the
 *   transfer ends as JF_HTTP_NO_ANSWER, to be retried as a new attempt;
 * - a redirect hop to another origin (follow_allowed).
 */
static int
prereq_cb(void *clientp, char *primary_ip, char *local_ip, int primary_port, int local_port)
{
	JfReq	   *r = clientp;

	/*
	 * A connection whose local address is its remote one reached this
	 * very host, through an address of its own that no list names (a
	 * public one, say): it counts as loopback, refused when loopback is
	 * unless allow_networks lists the address itself.  Nothing has been
	 * sent yet.
	 */
	if (jf_http_address_denied(r->http, primary_ip, primary_port) ||
		jf_http_own_host_denied(r->http, primary_ip, local_ip, primary_port))
	{
		r->denied = true;
		r->tried_allowed = false;
		return CURL_PREREQFUNC_ABORT;
	}
	if (r->sends == 0 && connection_closed_by_peer(r, local_ip, local_port,
													 primary_ip, primary_port))
	{
		r->refused = JF_REFUSED_STALE;
		return CURL_PREREQFUNC_ABORT;
	}
	if (r->sends > 0 && !r->answered)
	{
		r->refused = JF_REFUSED_RESEND;
		return CURL_PREREQFUNC_ABORT;
	}
	if (r->sends > 0 && !follow_allowed(r))
	{
		if (r->refused == JF_REFUSED_NONE)
			r->refused = JF_REFUSED_CROSS_ORIGIN;
		return CURL_PREREQFUNC_ABORT;
	}
	r->sends++;
	r->answered = false;
	/* the next hop's addresses are judged afresh */
	r->denied = false;
	r->tried_allowed = false;
	return CURL_PREREQFUNC_OK;
}

/* Turn a finished transfer's outcome into the result fields. */
void
jf_http_req_complete(JfHttp *h, JfReq *r, CURLcode rc)
{
	long		status = 0;

	r->easy_ok = rc == CURLE_OK;
	if (rc == CURLE_ABORTED_BY_CALLBACK && r->refused == JF_REFUSED_STALE)
	{
		/* curl closed that connection; nothing was sent on it */
		detach_easy(h, r);
		r->restarts++;
		h->stale_restarts++;
		jf_http_req_start(h, r);
		return;
	}
	jf_http_sockets_kept(h, r->easy);
	curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
	r->res.http_status = (int) status;
	r->res.curl_code = (int) rc;
	if (rc == CURLE_OK)
		r->res.error_kind = JF_HTTP_OK;
	else if (r->headers_cut && rc == CURLE_WRITE_ERROR)
		jf_http_req_set_error(r, JF_HTTP_OTHER,
							  "the response's headers went on past 256 kB: not read further");
	else if (r->cut && rc == CURLE_WRITE_ERROR)
	{
		/* the status and the excerpt are in: the answer is complete enough */
		r->res.error_kind = JF_HTTP_OK;
		r->res.body_truncated = true;
	}
	else if (r->denied && !r->tried_allowed &&
			 (rc == CURLE_COULDNT_CONNECT || rc == CURLE_ABORTED_BY_CALLBACK))
		jf_http_req_set_error(r, JF_HTTP_INVALID,
							  "connection refused by jobflow: the host's address is in deny_networks and not in allow_networks, or unspecified");
	else if (r->refused == JF_REFUSED_RESEND && rc == CURLE_ABORTED_BY_CALLBACK)
		jf_http_req_set_error(r, JF_HTTP_NO_ANSWER,
							  "connection closed without an answer after the request was sent (it may have been delivered)");
	else if (r->refused == JF_REFUSED_CROSS_ORIGIN && rc == CURLE_ABORTED_BY_CALLBACK)
		jf_http_req_set_error(r, JF_HTTP_REDIRECT,
							  "redirect to another origin not followed (jobflow.follow_cross_origin_redirects is off)");
	else if (r->refused == JF_REFUSED_CROSS_ORIGIN_BODY && rc == CURLE_ABORTED_BY_CALLBACK)
		jf_http_req_set_error(r, JF_HTTP_REDIRECT,
							  "redirect to another origin not followed: the request has a body");
	else if (r->refused == JF_REFUSED_CROSS_ORIGIN_CERT && rc == CURLE_COULDNT_CONNECT)
		jf_http_req_set_error(r, JF_HTTP_REDIRECT,
							  "redirect to another origin not followed: the request presents a client certificate");
	else
	{
		int			kind;

		switch (rc)
		{
			case CURLE_COULDNT_RESOLVE_HOST:
			case CURLE_COULDNT_RESOLVE_PROXY:
			case CURLE_COULDNT_CONNECT:
				kind = JF_HTTP_CONNECT;
				break;
			case CURLE_OPERATION_TIMEDOUT:
				kind = JF_HTTP_TIMEOUT;
				break;
			case CURLE_GOT_NOTHING:
				kind = JF_HTTP_NO_ANSWER;
				break;
			case CURLE_TOO_MANY_REDIRECTS:
			case CURLE_UNSUPPORTED_PROTOCOL:
				/* only a redirect can lead to another scheme */
				kind = JF_HTTP_REDIRECT;
				break;
			default:
				kind = JF_HTTP_OTHER;
				break;
		}
		jf_http_req_set_error(r, kind, r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc));
	}
	finish_req(h, r);
}

/*
 * The metrics class of a result.  The error kind decides first (it says
 * why jobflow stopped a transfer, whatever code curl then gave); a
 * connection or transport failure is then told apart by curl's code, so
 * that a name that does not resolve, a refused port and a bad certificate
 * are three different things on a dashboard.  Codes not named here are
 * "other" (protocol errors, resets, out of memory, ...).
 */
JfHttpClass
jf_http_result_class(const JfHttpResult *r)
{
	switch ((JfHttpErrorKind) r->error_kind)
	{
		case JF_HTTP_OK:
			return r->http_status >= 600 ? JF_CLASS_OTHER :
				r->http_status >= 500 ? JF_CLASS_5XX :
				r->http_status >= 400 ? JF_CLASS_4XX :
				r->http_status >= 300 ? JF_CLASS_3XX :
				r->http_status >= 200 ? JF_CLASS_2XX : JF_CLASS_OTHER;
		case JF_HTTP_TIMEOUT:
			return JF_CLASS_TIMEOUT;
		case JF_HTTP_INVALID:
			return JF_CLASS_DENIED;
		case JF_HTTP_NO_ANSWER:
			return JF_CLASS_NO_ANSWER;
		case JF_HTTP_REDIRECT:
			return JF_CLASS_REDIRECT;
		case JF_HTTP_CONNECT:
		case JF_HTTP_OTHER:
			break;
	}
	switch ((CURLcode) r->curl_code)
	{
		case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_COULDNT_RESOLVE_PROXY:
			return JF_CLASS_DNS;
		case CURLE_COULDNT_CONNECT:
		case CURLE_QUIC_CONNECT_ERROR:
			return JF_CLASS_CONNECT;
		case CURLE_OPERATION_TIMEDOUT:
			return JF_CLASS_TIMEOUT;
		case CURLE_SSL_CONNECT_ERROR:
		case CURLE_SSL_ENGINE_NOTFOUND:
		case CURLE_SSL_ENGINE_SETFAILED:
		case CURLE_SSL_CERTPROBLEM:
		case CURLE_SSL_CIPHER:
		case CURLE_PEER_FAILED_VERIFICATION:
		case CURLE_USE_SSL_FAILED:
		case CURLE_SSL_ENGINE_INITFAILED:
		case CURLE_SSL_CACERT_BADFILE:
		case CURLE_SSL_SHUTDOWN_FAILED:
		case CURLE_SSL_CRL_BADFILE:
		case CURLE_SSL_ISSUER_ERROR:
		case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
		case CURLE_SSL_INVALIDCERTSTATUS:
		case CURLE_SSL_CLIENTCERT:
#if LIBCURL_VERSION_NUM >= 0x080800
		case CURLE_ECH_REQUIRED:
#endif
			return JF_CLASS_TLS;
		case CURLE_RECV_ERROR:
		case CURLE_SEND_ERROR:

			/*
			 * A TLS alert from the receiver after curl's part of the
			 * handshake: over TLS 1.3 that is how a server that requires
			 * a client certificate refuses a missing or unknown one (the
			 * client's Finished went out before the server's verdict).
			 * OpenSSL names it in the text ("SSL routines::tlsv13 alert
			 * certificate required").
			 */
			if (strstr(r->error, "SSL routines") != NULL && strstr(r->error, " alert ") != NULL)
				return JF_CLASS_TLS;
			return JF_CLASS_OTHER;
		default:
			return JF_CLASS_OTHER;
	}
}

/* The class's label in jobflow.metrics(), e.g. outcomes_total{class="dns"}. */
const char *
jf_http_class_name(JfHttpClass c)
{
	static const char *const names[JF_NCLASS] = {
		"2xx", "3xx", "4xx", "5xx", "timeout", "connect", "dns", "tls",
		"denied", "no_answer", "redirect", "other"
	};

	return (int) c >= 0 && c < JF_NCLASS ? names[c] : "other";
}

/* ---------------------------------------------------------------------
 * curl callbacks
 * ---------------------------------------------------------------------
 */

/*
 * Keep the excerpt and stop reading once more than that comes: the status
 * decides the outcome and the excerpt is all that is kept, so the rest
 * would only hold the request's slot (until its timeout, for a receiver
 * that streams without end).  Returning less than we were given aborts
 * the transfer (CURLE_WRITE_ERROR, which jf_http_req_complete reads as
 * the answer it is, thanks to r->cut); an HTTP/1 connection is closed.
 */
static size_t
write_cb(char *data, size_t size, size_t nmemb, void *arg)
{
	JfReq	   *r = arg;
	size_t		n = size * nmemb;
	size_t		room = r->max_body - r->res.body_len;
	size_t		take = n < room ? n : room;

	if (take < n)
	{
		r->res.body_truncated = true;
		r->cut = true;
	}
	if (take == 0)
		return r->cut ? 0 : n;
	if (r->res.body_len + take + 1 > r->buf_cap)
	{
		size_t		ncap = r->buf_cap ? r->buf_cap * 2 : 1024;
		char	   *nb;

		if (ncap < r->res.body_len + take + 1)
			ncap = r->res.body_len + take + 1;
		if (ncap > r->max_body + 1)
			ncap = r->max_body + 1;
		nb = realloc(r->res.body, ncap);
		if (nb == NULL)
		{
			r->res.body_truncated = true;
			r->cut = true;
			return 0;
		}
		r->res.body = nb;
		r->buf_cap = ncap;
	}
	memcpy(r->res.body + r->res.body_len, data, take);
	r->res.body_len += take;
	return r->cut ? 0 : n;
}

/* Seconds or HTTP-date to a non-negative delay in ms; -1 if invalid. */
static int64_t
parse_retry_after(const char *v)
{
	if (*v >= '0' && *v <= '9')
	{
		int64_t		s = 0;

		for (; *v >= '0' && *v <= '9'; v++)
		{
			if (s < JF_RETRY_AFTER_MAX_S)
				s = s * 10 + (*v - '0');
		}
		if (*v != '\0')
			return -1;
		if (s > JF_RETRY_AFTER_MAX_S)
			s = JF_RETRY_AFTER_MAX_S;
		return s * 1000;
	}
	else
	{
		time_t		t = curl_getdate(v, NULL);
		int64_t		ms;

		if (t == (time_t) -1)
			return -1;
		ms = (int64_t) t * 1000 - jf_http_now_wall_ms();
		if (ms < 0)
			ms = 0;
		if (ms > JF_RETRY_AFTER_MAX_S * 1000)
			ms = JF_RETRY_AFTER_MAX_S * 1000;
		return ms;
	}
}

/*
 * Headers of every response in a redirect chain pass through here; a new
 * status line starts a new response, so only the final one's Retry-After
 * and body are reported.
 */
static size_t
header_cb(char *data, size_t size, size_t nmemb, void *arg)
{
	JfReq	   *r = arg;
	size_t		n = size * nmemb;
	static const char name[] = "retry-after:";

	/*
	 * Headers, 1xx responses and trailers that never end would grow
	 * libcurl's memory until the task's timeout: a transfer gets
	 * JF_HTTP_MAX_HEADER_BYTES of them in all, then ends (returning less
	 * than n stops it).
	 */
	r->header_bytes += n;
	if (r->header_bytes > JF_HTTP_MAX_HEADER_BYTES)
	{
		r->headers_cut = true;
		return 0;
	}

	if (n >= 5 && strncmp(data, "HTTP/", 5) == 0)
	{
		r->answered = true;
		r->res.retry_after_ms = -1;
		r->res.body_len = 0;
		r->res.body_truncated = false;
	}
	else if (n > sizeof(name) - 1 && strncasecmp(data, name, sizeof(name) - 1) == 0)
	{
		char		val[128];
		size_t		i = sizeof(name) - 1;
		size_t		len;

		while (i < n && (data[i] == ' ' || data[i] == '\t'))
			i++;
		len = n - i;
		while (len > 0 && (data[i + len - 1] == '\r' || data[i + len - 1] == '\n' ||
						   data[i + len - 1] == ' ' || data[i + len - 1] == '\t'))
			len--;
		if (len == 0 || len >= sizeof(val))
			r->res.retry_after_ms = -1;
		else
		{
			memcpy(val, data + i, len);
			val[len] = '\0';
			r->res.retry_after_ms = parse_retry_after(val);
		}
	}
	return n;
}

/* ---------------------------------------------------------------------
 * Starting requests
 * ---------------------------------------------------------------------
 */

#define SETOPT(opt, val) \
	do { if (curl_easy_setopt(e, opt, val) != CURLE_OK) return false; } while (0)

/*
 * The options every request of the dispatcher shares, on a new or reset
 * handle (so those left out keep libcurl's defaults); false on OOM.
 *
 * TLS: sessions are resumed across handles (the share), the CA store is
 * parsed once and cached in the multi handle (which curl does only when no
 * CA directory is set).  A CA directory of jobflow.tls_ca_path is what is
 * trusted, with the bundle of jobflow.tls_ca_file if that is set too, but
 * without libcurl's default bundle.
 */
static bool
configure_easy(JfHttp *h, CURL *e)
{
	SETOPT(CURLOPT_NOSIGNAL, 1L);
	SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
	SETOPT(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	SETOPT(CURLOPT_FOLLOWLOCATION, h->max_redirects > 0 ? 1L : 0L);
	SETOPT(CURLOPT_MAXREDIRS, (long) (h->max_redirects > 0 ? h->max_redirects : 0));
	SETOPT(CURLOPT_PROXY, h->proxy ? h->proxy : "");
	if (h->user_agent)
		SETOPT(CURLOPT_USERAGENT, h->user_agent);
	SETOPT(CURLOPT_WRITEFUNCTION, write_cb);
	SETOPT(CURLOPT_HEADERFUNCTION, header_cb);
	SETOPT(CURLOPT_OPENSOCKETFUNCTION, open_socket_cb);
	/* the connection keeps these, so they take the dispatcher, not r */
	SETOPT(CURLOPT_CLOSESOCKETFUNCTION, close_socket_cb);
	SETOPT(CURLOPT_CLOSESOCKETDATA, h);
	SETOPT(CURLOPT_PREREQFUNCTION, prereq_cb);
	if (h->share)
		SETOPT(CURLOPT_SHARE, h->share);
	if (h->ca_file)
		SETOPT(CURLOPT_CAINFO, h->ca_file);
	else if (h->ca_path)
		SETOPT(CURLOPT_CAINFO, (char *) NULL);
	if (h->ca_path)
		SETOPT(CURLOPT_CAPATH, h->ca_path);
	if (h->no_capath)
		SETOPT(CURLOPT_CAPATH, (char *) NULL);
	if (h->resolve)
		SETOPT(CURLOPT_RESOLVE, h->resolve);
	if (h->doh_url)
		SETOPT(CURLOPT_DOH_URL, h->doh_url);
	/* a slow DNS lookup must not make curl join its resolver thread */
	(void) curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);
	return true;
}

/*
 * The client certificate of mutual TLS, from memory (never a file), or
 * none.  Set on every request, since a recycled handle keeps the last
 * one's.  NOCOPY: the request owns the bytes (and wipes the key) and
 * outlives its transfer.  libcurl keys the reuse of connections and of TLS
 * sessions on the certificate blob, so a connection made with one
 * certificate, or none, never carries a request with another.
 */
static bool
set_client_certificate(CURL *e, JfReq *r)
{
	struct curl_blob cert = {r->client_cert, r->client_cert_len, CURL_BLOB_NOCOPY};
	struct curl_blob key = {r->client_key, r->client_key_len, CURL_BLOB_NOCOPY};

	if (r->client_cert == NULL)
	{
		SETOPT(CURLOPT_SSLCERT_BLOB, (struct curl_blob *) NULL);
		SETOPT(CURLOPT_SSLKEY_BLOB, (struct curl_blob *) NULL);
		return true;
	}
	SETOPT(CURLOPT_SSLCERTTYPE, "PEM");
	SETOPT(CURLOPT_SSLCERT_BLOB, &cert);
	SETOPT(CURLOPT_SSLKEYTYPE, "PEM");
	SETOPT(CURLOPT_SSLKEY_BLOB, &key);
	return true;
}

/*
 * Every option that can differ from one request to the next, each set on
 * every call, to its default when this request does not need it: a
 * recycled handle keeps whatever the last request set (a redirect may even
 * have swapped its header list, see follow_allowed).  false on OOM.
 *
 * A burst to an HTTP/2 receiver waits for the first connection's ALPN and
 * multiplexes on it (PIPEWAIT) rather than opening one connection per
 * request.  Only over TLS: curl 7.88 learns that a plain-http:// server
 * cannot multiplex from its first response's status line, and wakes the
 * waiting requests only when that transfer ends, so they would all wait
 * behind the first answer (past their own timeouts, unsent).  Over TLS the
 * handshake's ALPN wakes them.
 *
 * A request with a body goes over HTTP/1.1 unless libcurl is 8.3 or
 * later: before that, an HTTP/2 upload to a receiver that answers before
 * reading the body and closes the stream (as RFC 9113, section 8.1,
 * allows: a 401, or nginx's "return") fails with a stream error, even
 * after the answer came, or hangs until its timeout; either way the
 * request was delivered and would be retried.
 *
 * The method: POSTFIELDS makes any request a POST in curl, which HTTPGET
 * then undoes for those without fields (HEAD never sends one); NOBODY makes a HEAD (and 0 undoes
 * only that); CUSTOMREQUEST names any other method.
 */
static bool
set_request_options(JfHttp *h, CURL *e, JfReq *r, long timeout_ms)
{
	bool		has_body = r->body_len > 0;
	bool		https = strncmp(r->origin, "https://", 8) == 0;
	bool		h1_only = https && has_body && !h->h2_uploads;
	bool		is_get = strcmp(r->method, "GET") == 0;
	bool		is_head = strcmp(r->method, "HEAD") == 0;
	bool		is_post = strcmp(r->method, "POST") == 0;
	bool		fields = (has_body || is_post) && !is_head;

	SETOPT(CURLOPT_CURLU, r->uh);
	SETOPT(CURLOPT_PRIVATE, r);
	SETOPT(CURLOPT_ERRORBUFFER, r->errbuf);
	SETOPT(CURLOPT_TIMEOUT_MS, timeout_ms);
	SETOPT(CURLOPT_HTTPHEADER, r->headers);
	SETOPT(CURLOPT_WRITEDATA, r);
	SETOPT(CURLOPT_HEADERDATA, r);
	SETOPT(CURLOPT_OPENSOCKETDATA, r);
	SETOPT(CURLOPT_PREREQDATA, r);
	/* a stale connection seldom comes alone: after two, a new one for sure */
	SETOPT(CURLOPT_FRESH_CONNECT, (r->restarts >= 2 || r->fresh) ? 1L : 0L);
	SETOPT(CURLOPT_HTTP_VERSION, h1_only ? (long) CURL_HTTP_VERSION_1_1 : h->http_version);
	SETOPT(CURLOPT_PIPEWAIT, https && !h1_only ? 1L : 0L);
	if (!set_client_certificate(e, r))
		return false;

	SETOPT(CURLOPT_POSTFIELDS, fields ? (has_body ? r->body : "") : (char *) NULL);
	SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, fields ? (curl_off_t) r->body_len : (curl_off_t) -1);
	if (!fields)
		SETOPT(CURLOPT_HTTPGET, 1L);
	SETOPT(CURLOPT_NOBODY, is_head ? 1L : 0L);
	SETOPT(CURLOPT_CUSTOMREQUEST,
		   (is_get && !has_body) || is_head || is_post ? (char *) NULL : r->method);
	return true;
}

#undef SETOPT

/*
 * Add one request to the multi handle.  Any failure turns into a result
 * (never a silent loss); the host slot was already taken by the caller.
 */
void
jf_http_req_start(JfHttp *h, JfReq *r)
{
	CURL	   *e;
	uint32_t	gen = 0;
	long		timeout_ms = r->timeout_ms > 0 ? r->timeout_ms : 0;

	/*
	 * A request started again after a stale connection keeps its start:
	 * its timeout counts from there.
	 */
	if (r->restarts == 0)
		r->res.started_at_ms = jf_http_now_wall_ms();
	else if (timeout_ms > 0)
	{
		timeout_ms -= (long) (jf_http_now_wall_ms() - r->res.started_at_ms);
		if (timeout_ms < 1)
			timeout_ms = 1;
	}
	if (h->npool > 0)
	{
		h->npool--;
		e = h->pool[h->npool];
		gen = h->pool_gen[h->npool];
	}
	else
		e = curl_easy_init();
	if (e == NULL)
	{
		jf_http_req_set_error(r, JF_HTTP_OTHER, "could not create a curl handle");
		finish_req(h, r);
		return;
	}
	r->errbuf[0] = '\0';
	r->max_body = h->max_response_bytes;
	r->http = h;
	r->denied = false;
	r->tried_allowed = false;
	r->header_bytes = 0;
	r->headers_cut = false;
	r->cut = false;
	r->refused = JF_REFUSED_NONE;
	r->sends = 0;
	r->answered = false;

	/* a new handle, or one set up under an older configuration */
	if (gen != h->config_gen)
	{
		if (gen != 0)
			curl_easy_reset(e);
		if (!configure_easy(h, e))
			goto fail;
		gen = h->config_gen;
	}
	if (!set_request_options(h, e, r, timeout_ms))
		goto fail;
	if (curl_multi_add_handle(h->multi, e) != CURLM_OK)
		goto fail;
	r->easy = e;
	r->easy_gen = gen;
	r->easy_ok = false;			/* until the transfer ends well */
	r->prev = NULL;
	r->next = h->active;
	if (h->active)
		h->active->prev = r;
	h->active = r;
	h->nactive++;
	return;

fail:
	curl_easy_cleanup(e);
	jf_http_req_set_error(r, JF_HTTP_OTHER, "could not set up the request (out of memory?)");
	finish_req(h, r);
}

/* ---------------------------------------------------------------------
 * Copying and checking a submitted request
 * ---------------------------------------------------------------------
 */

/* Header names match case-insensitively, up to the colon (or ";" for curl). */
static bool
header_is(const char *line, const char *name)
{
	size_t		n = strlen(name);

	return strncasecmp(line, name, n) == 0 &&
		(line[n] == ':' || line[n] == ';' || line[n] == ' ' || line[n] == '\t');
}

/*
 * Check the URL and derive the host key (lower-case scheme://host:port).
 * Returns NULL if fine, else a message for an INVALID result; *oom is set
 * instead on allocation failure.  URL credentials are remembered only to
 * scrub them from error texts.  The parsed URL is kept in r->uh.
 */
static const char *
parse_url(JfReq *r, char **key, bool *oom)
{
	CURLU	   *u = curl_url();
	char	   *scheme = NULL,
			   *host = NULL,
			   *port = NULL,
			   *part = NULL;
	const char *problem = NULL;
	CURLUcode	uc;

	*key = NULL;
	if (u == NULL)
	{
		*oom = true;
		return NULL;
	}
	uc = curl_url_set(u, CURLUPART_URL, r->url, 0);
	if (uc == CURLUE_OUT_OF_MEMORY)
		*oom = true;
	else if (uc != CURLUE_OK)
		problem = "invalid URL";
	else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
			 (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0))
		problem = "URL scheme not allowed (only http and https)";
	else if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || *host == '\0')
		problem = "URL has no host";
	else if (curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK)
		problem = "URL has no usable port";
	else
	{
		size_t		len = strlen(scheme) + strlen(host) + strlen(port) + 5;

		if (curl_url_get(u, CURLUPART_USER, &part, 0) == CURLUE_OK)
		{
			if (!jf_http_dup_opt(part, &r->secret_user))
				*oom = true;
			curl_free(part);
		}
		if (curl_url_get(u, CURLUPART_PASSWORD, &part, 0) == CURLUE_OK)
		{
			if (!jf_http_dup_opt(part, &r->secret_pass))
				*oom = true;
			curl_free(part);
		}
		*key = malloc(len);
		if (*key == NULL)
			*oom = true;
		else
		{
			snprintf(*key, len, "%s://%s:%s", scheme, host, port);
			for (char *p = *key; *p; p++)
				if (*p >= 'A' && *p <= 'Z')
					*p += 'a' - 'A';
		}
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	/* kept for curl (CURLOPT_CURLU), which then need not parse it again */
	if (problem == NULL && !*oom)
		r->uh = u;
	else
		curl_url_cleanup(u);
	return problem;
}

/*
 * Many tasks call the same URL: the parse of the last URL seen in each of
 * a few slots (by a hash of its text) is kept, and a request for the same
 * text gets a copy of it (curl_url_dup, a handful of strdups) instead of
 * parsing again.  true if r->uh and *key were set that way (or *oom).
 */
static bool
url_memo_get(JfHttp *h, JfReq *r, char **key, bool *oom)
{
	JfUrlMemo  *m = &h->urls[jf_hash_string(r->url) & (JF_URL_MEMO - 1)];

	if (m->url == NULL || strcmp(m->url, r->url) != 0)
		return false;
	r->uh = curl_url_dup(m->uh);
	*key = strdup(m->key);
	if (r->uh == NULL || *key == NULL)
		*oom = true;
	return true;
}

/*
 * Remember r's freshly parsed URL in its slot.  Not one with credentials,
 * so that no secret outlives its request; on OOM nothing is kept.
 */
static void
url_memo_put(JfHttp *h, const JfReq *r, const char *key)
{
	JfUrlMemo  *m = &h->urls[jf_hash_string(r->url) & (JF_URL_MEMO - 1)];
	JfUrlMemo	n;

	if (r->secret_user || r->secret_pass)
		return;
	n.url = strdup(r->url);
	n.uh = curl_url_dup(r->uh);
	n.key = strdup(key);
	if (n.url == NULL || n.uh == NULL || n.key == NULL)
	{
		free(n.url);
		curl_url_cleanup(n.uh);
		free(n.key);
		return;
	}
	free(m->url);
	curl_url_cleanup(m->uh);
	free(m->key);
	*m = n;
}

/* At the dispatcher's end. */
void
jf_http_url_memo_clear(JfHttp *h)
{
	for (int i = 0; i < JF_URL_MEMO; i++)
	{
		free(h->urls[i].url);
		curl_url_cleanup(h->urls[i].uh);
		free(h->urls[i].key);
		h->urls[i].url = NULL;
		h->urls[i].uh = NULL;
		h->urls[i].key = NULL;
	}
}

/* Copy the request into r; same contract as parse_url(). */
const char *
jf_http_req_prepare(JfHttp *h, JfReq *r, const JfHttpRequest *req, char **key,
					bool *oom)
{
	char		line[64];
	const char *problem;

	*key = NULL;
	if (req->url == NULL)
		return "no URL";
	for (size_t i = 0; i < sizeof(jf_methods) / sizeof(jf_methods[0]); i++)
		if (req->method && strcasecmp(req->method, jf_methods[i]) == 0)
			r->method = jf_methods[i];
	if (r->method == NULL)
		return "HTTP method not allowed";
	if (req->body_len > 0 && req->body == NULL)
		return "body length without a body";
	if (req->nheaders < 0 || (req->nheaders > 0 && req->headers == NULL))
		return "bad header list";

	if (!jf_http_dup_opt(req->url, &r->url))
	{
		*oom = true;
		return NULL;
	}
	for (int i = 0; i < req->nheaders; i++)
	{
		const char *hl = req->headers[i];
		struct curl_slist *n;

		if (hl == NULL || strpbrk(hl, "\r\n") != NULL || strchr(hl, ':') == NULL)
			return "invalid header line";
		if (header_is(hl, "Expect") || header_is(hl, "X-Jobflow-Task-Id") ||
			header_is(hl, "X-Jobflow-Attempt"))
			continue;
		if ((n = curl_slist_append(r->headers, hl)) == NULL)
		{
			*oom = true;
			return NULL;
		}
		r->headers = n;
	}
	for (int i = 0; i < 3; i++)
	{
		struct curl_slist *n;

		if (i == 0)
			header_with_number(line, "X-Jobflow-Task-Id: ", req->task_id);
		else if (i == 1)
			header_with_number(line, "X-Jobflow-Attempt: ", req->attempt);
		else
			strcpy(line, "Expect:");
		if ((n = curl_slist_append(r->headers, line)) == NULL)
		{
			*oom = true;
			return NULL;
		}
		r->headers = n;
	}
	if (req->body_len > 0)
	{
		r->body = malloc(req->body_len);
		if (r->body == NULL)
		{
			*oom = true;
			return NULL;
		}
		memcpy(r->body, req->body, req->body_len);
		r->body_len = req->body_len;
	}
	r->timeout_ms = req->timeout_ms;
	if (req->client_cert != NULL && req->client_key != NULL)
	{
		r->client_cert = malloc(req->client_cert_len);
		r->client_key = malloc(req->client_key_len);
		if (r->client_cert == NULL || r->client_key == NULL)
		{
			*oom = true;
			return NULL;
		}
		memcpy(r->client_cert, req->client_cert, req->client_cert_len);
		r->client_cert_len = req->client_cert_len;
		memcpy(r->client_key, req->client_key, req->client_key_len);
		r->client_key_len = req->client_key_len;
	}
	if (url_memo_get(h, r, key, oom))
		problem = NULL;
	else
	{
		problem = parse_url(r, key, oom);
		if (problem == NULL && !*oom)
			url_memo_put(h, r, *key);
	}
	if (problem == NULL && !*oom && !jf_http_dup_opt(*key, &r->origin))
		*oom = true;
	return problem;
}
