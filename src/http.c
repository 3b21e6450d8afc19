/*-------------------------------------------------------------------------
 *
 * http.c
 *	  Non-blocking HTTP dispatcher for jobflow's worker (libcurl multi).
 *
 * libcurl's multi interface is driven through curl_multi_socket_action():
 * curl tells us which sockets to watch (socket callback) and when to call
 * it back (timer callback).  We mirror the sockets into one private epoll
 * fd, so the worker waits on a single fd plus its latch, and we keep the
 * timer as an absolute monotonic deadline.
 *
 * Admission control is ours, not curl's: a request waits in a per-host
 * FIFO (host = scheme://host:port) until both the global cap and its
 * host's cap allow it, and only then is its easy handle added to the multi
 * handle, so CURLOPT_TIMEOUT_MS counts from the real start.  Hosts that
 * can start something sit in a binary min-heap keyed by the sequence
 * number of their oldest waiting request: the next request started is the
 * oldest one whose host is not saturated, so a dead host full of hung
 * requests never holds back other hosts.
 *
 * Finished requests move to a result FIFO.  The result lives inside the
 * request struct, so finishing needs no allocation and cannot be lost to
 * OOM.  Easy handles are recycled; connections and DNS entries are cached
 * by the multi handle.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "http.h"

#define JF_EASY_POOL_MAX	256
#define JF_EPOLL_BATCH		256
#define JF_RETRY_AFTER_MAX_S	(365LL * 24 * 3600)

typedef struct JfHost JfHost;

typedef struct JfReq
{
	struct JfReq *next;			/* host FIFO, active list or result FIFO */
	struct JfReq *prev;			/* active list only */
	uint64_t	seq;			/* submission order */
	JfHost	   *host;			/* NULL once released or if never queued */
	CURL	   *easy;
	char	   *url;
	const char *method;			/* static canonical name */
	struct curl_slist *headers;
	char	   *body;
	size_t		body_len;
	int			timeout_ms;
	char	   *secret_user;	/* URL credentials, only to scrub errors */
	char	   *secret_pass;
	size_t		max_body;		/* excerpt cap, fixed when started */
	size_t		buf_cap;
	char		errbuf[CURL_ERROR_SIZE];
	JfHttpResult res;
} JfReq;

struct JfHost
{
	JfHost	   *hnext;			/* hash chain */
	uint32_t	hash;
	int			active;			/* requests of this host in flight */
	int			heap_idx;		/* -1 when not in the heap */
	JfReq	   *head;			/* waiting requests, oldest first */
	JfReq	   *tail;
	char		key[];
};

struct JfHttp
{
	CURLM	   *multi;
	int			epfd;
	int			max_concurrent;
	int			max_per_host;
	size_t		max_response_bytes;
	int			max_redirects;
	char	   *user_agent;
	char	   *proxy;
	bool		timer_set;
	int64_t		timer_deadline_us;	/* CLOCK_MONOTONIC */
	uint64_t	next_seq;
	JfHost	  **buckets;
	size_t		nbuckets;		/* power of two */
	size_t		nhosts;
	JfHost	  **heap;			/* capacity always >= nhosts */
	size_t		heap_len;
	size_t		heap_cap;
	JfReq	   *active;			/* doubly linked */
	int			nactive;
	int			nqueued;
	JfReq	   *done_head;
	JfReq	   *done_tail;
	CURL	   *pool[JF_EASY_POOL_MAX];
	int			npool;
};

static const char *const jf_methods[] = {
	"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"
};

/* Marker stored as curl's per-socket pointer: "registered in epoll". */
static char jf_sock_registered;

static void start_queued(JfHttp *h);

static int64_t
now_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t
now_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
set_err(char *errbuf, size_t errlen, const char *msg)
{
	if (errbuf && errlen > 0)
		snprintf(errbuf, errlen, "%s", msg);
}

/* strdup that maps NULL to NULL, so callers can tell OOM from "unset". */
static bool
dup_opt(const char *s, char **out)
{
	*out = NULL;
	if (s == NULL)
		return true;
	*out = strdup(s);
	return *out != NULL;
}

/*
 * Curl and OpenSSL global state must be set up once, before any thread
 * exists and outside any signal handler, so the worker does it explicitly
 * at start rather than us doing it lazily.  We also refuse a libcurl too
 * old for CURLOPT_PROTOCOLS_STR, which is our only scheme restriction.
 */
bool
jf_http_global_init(char *errbuf, size_t errlen)
{
	curl_version_info_data *v;
	CURLcode	rc;

	rc = curl_global_init(CURL_GLOBAL_DEFAULT);
	if (rc != CURLE_OK)
	{
		set_err(errbuf, errlen, curl_easy_strerror(rc));
		return false;
	}
	v = curl_version_info(CURLVERSION_NOW);
	if (v->version_num < 0x075500)
	{
		if (errbuf && errlen > 0)
			snprintf(errbuf, errlen, "libcurl %s is too old (7.85 or later needed)",
					 v->version);
		curl_global_cleanup();
		return false;
	}
	return true;
}

void
jf_http_global_cleanup(void)
{
	curl_global_cleanup();
}

/* ---------------------------------------------------------------------
 * Host table and the heap of hosts that can start a request
 * ---------------------------------------------------------------------
 */

static uint32_t
hash_key(const char *s)
{
	uint32_t	x = 2166136261u;

	for (; *s; s++)
		x = (x ^ (unsigned char) *s) * 16777619u;
	return x;
}

static bool
heap_less(const JfHost *a, const JfHost *b)
{
	return a->head->seq < b->head->seq;
}

static void
heap_place(JfHttp *h, size_t i, JfHost *host)
{
	h->heap[i] = host;
	host->heap_idx = (int) i;
}

static void
heap_sift_up(JfHttp *h, size_t i)
{
	JfHost	   *x = h->heap[i];

	while (i > 0)
	{
		size_t		parent = (i - 1) / 2;

		if (!heap_less(x, h->heap[parent]))
			break;
		heap_place(h, i, h->heap[parent]);
		i = parent;
	}
	heap_place(h, i, x);
}

static void
heap_sift_down(JfHttp *h, size_t i)
{
	JfHost	   *x = h->heap[i];

	for (;;)
	{
		size_t		c = 2 * i + 1;

		if (c >= h->heap_len)
			break;
		if (c + 1 < h->heap_len && heap_less(h->heap[c + 1], h->heap[c]))
			c++;
		if (!heap_less(h->heap[c], x))
			break;
		heap_place(h, i, h->heap[c]);
		i = c;
	}
	heap_place(h, i, x);
}

/*
 * Re-establish "host is in the heap iff it has a waiting request and a
 * free slot", and its position, after anything about it changed.  Never
 * allocates: heap capacity is reserved when the host is created.
 */
static void
heap_fix(JfHttp *h, JfHost *host)
{
	bool		want = host->head != NULL && host->active < h->max_per_host;

	if (want && host->heap_idx < 0)
	{
		heap_place(h, h->heap_len++, host);
		heap_sift_up(h, h->heap_len - 1);
	}
	else if (!want && host->heap_idx >= 0)
	{
		size_t		i = (size_t) host->heap_idx;
		JfHost	   *last = h->heap[--h->heap_len];

		host->heap_idx = -1;
		if (i < h->heap_len)
		{
			heap_place(h, i, last);
			heap_sift_up(h, i);
			heap_sift_down(h, (size_t) last->heap_idx);
		}
	}
	else if (want)
	{
		heap_sift_up(h, (size_t) host->heap_idx);
		heap_sift_down(h, (size_t) host->heap_idx);
	}
}

static void
host_rehash(JfHttp *h)
{
	size_t		n = h->nbuckets * 2;
	JfHost	  **nb = calloc(n, sizeof(JfHost *));

	if (nb == NULL)
		return;					/* keep the old table: longer chains only */
	for (size_t i = 0; i < h->nbuckets; i++)
	{
		JfHost	   *x = h->buckets[i];

		while (x)
		{
			JfHost	   *next = x->hnext;

			x->hnext = nb[x->hash & (n - 1)];
			nb[x->hash & (n - 1)] = x;
			x = next;
		}
	}
	free(h->buckets);
	h->buckets = nb;
	h->nbuckets = n;
}

/* Find or create a host entry; NULL only on OOM. */
static JfHost *
host_get(JfHttp *h, const char *key)
{
	uint32_t	hv = hash_key(key);
	JfHost	   *x;
	size_t		klen;

	for (x = h->buckets[hv & (h->nbuckets - 1)]; x; x = x->hnext)
		if (x->hash == hv && strcmp(x->key, key) == 0)
			return x;

	if (h->heap_cap < h->nhosts + 1)
	{
		size_t		ncap = h->heap_cap ? h->heap_cap * 2 : 64;
		JfHost	  **nh = realloc(h->heap, ncap * sizeof(JfHost *));

		if (nh == NULL)
			return NULL;
		h->heap = nh;
		h->heap_cap = ncap;
	}
	klen = strlen(key);
	x = malloc(sizeof(JfHost) + klen + 1);
	if (x == NULL)
		return NULL;
	memcpy(x->key, key, klen + 1);
	x->hash = hv;
	x->active = 0;
	x->heap_idx = -1;
	x->head = x->tail = NULL;
	x->hnext = h->buckets[hv & (h->nbuckets - 1)];
	h->buckets[hv & (h->nbuckets - 1)] = x;
	h->nhosts++;
	if (h->nhosts > h->nbuckets)
		host_rehash(h);
	return x;
}

/* Hosts are dropped when idle so that one-off hosts do not accumulate. */
static void
host_maybe_free(JfHttp *h, JfHost *host)
{
	JfHost	  **pp;

	if (host->active > 0 || host->head != NULL)
		return;
	for (pp = &h->buckets[host->hash & (h->nbuckets - 1)]; *pp; pp = &(*pp)->hnext)
	{
		if (*pp == host)
		{
			*pp = host->hnext;
			break;
		}
	}
	h->nhosts--;
	free(host);
}

/* ---------------------------------------------------------------------
 * Requests and results
 * ---------------------------------------------------------------------
 */

static void
req_free(JfReq *r, bool with_result_body)
{
	free(r->url);
	curl_slist_free_all(r->headers);
	free(r->body);
	free(r->secret_user);
	free(r->secret_pass);
	if (with_result_body)
		free(r->res.body);
	free(r);
}

static void
push_done(JfHttp *h, JfReq *r)
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

static void
set_result_error(JfReq *r, int kind, const char *msg)
{
	r->res.error_kind = kind;
	snprintf(r->res.error, sizeof(r->res.error), "%s", msg);
	scrub(r->res.error, r->secret_user);
	scrub(r->res.error, r->secret_pass);
}

static void
recycle_easy(JfHttp *h, CURL *e)
{
	if (h->npool < JF_EASY_POOL_MAX)
	{
		curl_easy_reset(e);
		h->pool[h->npool++] = e;
	}
	else
		curl_easy_cleanup(e);
}

/*
 * Move a started (or failed-to-start) request to the result FIFO, freeing
 * its host slot.  Callers run start_queued() afterwards.
 */
static void
finish_req(JfHttp *h, JfReq *r)
{
	JfHost	   *host = r->host;

	if (r->easy)
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
		recycle_easy(h, r->easy);
		r->easy = NULL;
	}
	if (host)
	{
		r->host = NULL;
		host->active--;
		heap_fix(h, host);
		host_maybe_free(h, host);
	}
	if (r->res.body)
		r->res.body[r->res.body_len] = '\0';
	r->res.finished_at_ms = now_wall_ms();
	/* drop what only the transfer needed */
	free(r->body);
	r->body = NULL;
	curl_slist_free_all(r->headers);
	r->headers = NULL;
	push_done(h, r);
}

/* Turn a finished transfer's outcome into the result fields. */
static void
complete_transfer(JfHttp *h, JfReq *r, CURLcode rc)
{
	long		status = 0;

	curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
	r->res.http_status = (int) status;
	r->res.curl_code = (int) rc;
	if (rc == CURLE_OK)
		r->res.error_kind = JF_HTTP_OK;
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
			default:
				kind = JF_HTTP_OTHER;
				break;
		}
		set_result_error(r, kind, r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc));
	}
	finish_req(h, r);
}

/* ---------------------------------------------------------------------
 * curl callbacks
 * ---------------------------------------------------------------------
 */

/*
 * Keep the excerpt, read and drop the rest: returning less than we were
 * given would abort the transfer, and a big answer is still a success.
 */
static size_t
write_cb(char *data, size_t size, size_t nmemb, void *arg)
{
	JfReq	   *r = arg;
	size_t		n = size * nmemb;
	size_t		room = r->max_body - r->res.body_len;
	size_t		take = n < room ? n : room;

	if (take < n)
		r->res.body_truncated = true;
	if (take == 0)
		return n;
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
			return n;
		}
		r->res.body = nb;
		r->buf_cap = ncap;
	}
	memcpy(r->res.body + r->res.body_len, data, take);
	r->res.body_len += take;
	return n;
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
		ms = (int64_t) t * 1000 - now_wall_ms();
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

	if (n >= 5 && strncmp(data, "HTTP/", 5) == 0)
	{
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

/* Mirror curl's interest in a socket into our epoll set. */
static int
sock_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
	JfHttp	   *h = userp;
	struct epoll_event ev;

	(void) e;
	if (what == CURL_POLL_REMOVE)
	{
		if (socketp)
		{
			epoll_ctl(h->epfd, EPOLL_CTL_DEL, s, NULL);
			curl_multi_assign(h->multi, s, NULL);
		}
		return 0;
	}
	memset(&ev, 0, sizeof(ev));
	ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) |
		((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
	ev.data.fd = s;
	if (socketp)
	{
		if (epoll_ctl(h->epfd, EPOLL_CTL_MOD, s, &ev) != 0 &&
			(errno != ENOENT || epoll_ctl(h->epfd, EPOLL_CTL_ADD, s, &ev) != 0))
			return -1;
	}
	else
	{
		if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, s, &ev) != 0 &&
			(errno != EEXIST || epoll_ctl(h->epfd, EPOLL_CTL_MOD, s, &ev) != 0))
			return -1;
		curl_multi_assign(h->multi, s, &jf_sock_registered);
	}
	return 0;
}

/* curl may not call us from inside its own callbacks: just note a deadline. */
static int
timer_cb(CURLM *m, long timeout_ms, void *userp)
{
	JfHttp	   *h = userp;

	(void) m;
	if (timeout_ms < 0)
		h->timer_set = false;
	else
	{
		h->timer_set = true;
		h->timer_deadline_us = now_mono_us() + (int64_t) timeout_ms * 1000;
	}
	return 0;
}

/* ---------------------------------------------------------------------
 * Starting requests
 * ---------------------------------------------------------------------
 */

#define SETOPT(opt, val) \
	do { if (curl_easy_setopt(e, opt, val) != CURLE_OK) goto fail; } while (0)

/*
 * Add one request to the multi handle.  Any failure turns into a result
 * (never a silent loss); the host slot was already taken by the caller.
 */
static void
start_req(JfHttp *h, JfReq *r)
{
	CURL	   *e;
	bool		has_body = r->body_len > 0;

	r->res.started_at_ms = now_wall_ms();
	e = h->npool > 0 ? h->pool[--h->npool] : curl_easy_init();
	if (e == NULL)
	{
		set_result_error(r, JF_HTTP_OTHER, "could not create a curl handle");
		finish_req(h, r);
		return;
	}
	r->errbuf[0] = '\0';
	r->max_body = h->max_response_bytes;
	SETOPT(CURLOPT_URL, r->url);
	SETOPT(CURLOPT_PRIVATE, r);
	SETOPT(CURLOPT_ERRORBUFFER, r->errbuf);
	SETOPT(CURLOPT_NOSIGNAL, 1L);
	SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
	SETOPT(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	SETOPT(CURLOPT_FOLLOWLOCATION, h->max_redirects > 0 ? 1L : 0L);
	SETOPT(CURLOPT_MAXREDIRS, (long) (h->max_redirects > 0 ? h->max_redirects : 0));
	SETOPT(CURLOPT_TIMEOUT_MS, (long) (r->timeout_ms > 0 ? r->timeout_ms : 0));
	SETOPT(CURLOPT_PROXY, h->proxy ? h->proxy : "");
	if (h->user_agent)
		SETOPT(CURLOPT_USERAGENT, h->user_agent);
	SETOPT(CURLOPT_HTTPHEADER, r->headers);
	SETOPT(CURLOPT_WRITEFUNCTION, write_cb);
	SETOPT(CURLOPT_WRITEDATA, r);
	SETOPT(CURLOPT_HEADERFUNCTION, header_cb);
	SETOPT(CURLOPT_HEADERDATA, r);
	/* a slow DNS lookup must not make curl join its resolver thread */
	(void) curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);

	if (strcmp(r->method, "HEAD") == 0)
		SETOPT(CURLOPT_NOBODY, 1L);
	else if (strcmp(r->method, "POST") == 0)
	{
		SETOPT(CURLOPT_POST, 1L);
		SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) r->body_len);
		SETOPT(CURLOPT_POSTFIELDS, has_body ? r->body : "");
	}
	else
	{
		if (strcmp(r->method, "GET") == 0 && !has_body)
			SETOPT(CURLOPT_HTTPGET, 1L);
		else
			SETOPT(CURLOPT_CUSTOMREQUEST, r->method);
		if (has_body)
		{
			SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) r->body_len);
			SETOPT(CURLOPT_POSTFIELDS, r->body);
		}
	}

	if (curl_multi_add_handle(h->multi, e) != CURLM_OK)
		goto fail;
	r->easy = e;
	r->prev = NULL;
	r->next = h->active;
	if (h->active)
		h->active->prev = r;
	h->active = r;
	h->nactive++;
	return;

fail:
	curl_easy_cleanup(e);
	set_result_error(r, JF_HTTP_OTHER, "could not set up the request (out of memory?)");
	finish_req(h, r);
}

/* Start the oldest waiting requests whose hosts have room, up to the cap. */
static void
start_queued(JfHttp *h)
{
	while (h->nactive < h->max_concurrent && h->heap_len > 0)
	{
		JfHost	   *host = h->heap[0];
		JfReq	   *r = host->head;

		host->head = r->next;
		if (host->head == NULL)
			host->tail = NULL;
		r->next = NULL;
		h->nqueued--;
		host->active++;
		heap_fix(h, host);
		start_req(h, r);
	}
}

/* ---------------------------------------------------------------------
 * Submission
 * ---------------------------------------------------------------------
 */

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
 * scrub them from error texts.
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
			if (!dup_opt(part, &r->secret_user))
				*oom = true;
			curl_free(part);
		}
		if (curl_url_get(u, CURLUPART_PASSWORD, &part, 0) == CURLUE_OK)
		{
			if (!dup_opt(part, &r->secret_pass))
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
	curl_url_cleanup(u);
	return problem;
}

/* Copy the request into r; same contract as parse_url(). */
static const char *
prepare_req(JfReq *r, const JfHttpRequest *req, char **key, bool *oom)
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

	if (!dup_opt(req->url, &r->url))
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
			snprintf(line, sizeof(line), "X-Jobflow-Task-Id: %" PRId64, req->task_id);
		else if (i == 1)
			snprintf(line, sizeof(line), "X-Jobflow-Attempt: %" PRId32, req->attempt);
		else
			snprintf(line, sizeof(line), "Expect:");
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
	problem = parse_url(r, key, oom);
	return problem;
}

/*
 * Queue a request and start it at once if the caps allow (adding a handle
 * only arms curl's timer; the I/O happens in jf_http_perform()).
 */
bool
jf_http_submit(JfHttp *h, const JfHttpRequest *req)
{
	JfReq	   *r = calloc(1, sizeof(JfReq));
	char	   *key = NULL;
	bool		oom = false;
	const char *problem;
	JfHost	   *host;

	if (r == NULL)
		return false;
	r->res.task_id = req->task_id;
	r->res.attempt = req->attempt;
	r->res.user = req->user;
	r->res.retry_after_ms = -1;
	r->res.queued_at_ms = now_wall_ms();
	r->res.started_at_ms = r->res.queued_at_ms;

	problem = prepare_req(r, req, &key, &oom);
	if (oom)
	{
		free(key);
		req_free(r, true);
		return false;
	}
	if (problem)
	{
		free(key);
		set_result_error(r, JF_HTTP_INVALID, problem);
		r->res.finished_at_ms = r->res.queued_at_ms;
		curl_slist_free_all(r->headers);
		r->headers = NULL;
		free(r->body);
		r->body = NULL;
		push_done(h, r);
		return true;
	}
	host = host_get(h, key);
	free(key);
	if (host == NULL)
	{
		req_free(r, true);
		return false;
	}
	r->seq = h->next_seq++;
	r->host = host;
	if (host->tail)
		host->tail->next = r;
	else
		host->head = r;
	host->tail = r;
	h->nqueued++;
	heap_fix(h, host);
	start_queued(h);
	return true;
}

/* ---------------------------------------------------------------------
 * Driving
 * ---------------------------------------------------------------------
 */

static void
drain_messages(JfHttp *h)
{
	CURLMsg    *msg;
	int			left;

	while ((msg = curl_multi_info_read(h->multi, &left)) != NULL)
	{
		CURL	   *e = msg->easy_handle;
		CURLcode	rc = msg->data.result;
		JfReq	   *r = NULL;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **) &r);
		if (r)
			complete_transfer(h, r, rc);
	}
}

/*
 * Re-read curl's next deadline after firing its timer: curl only calls the
 * timer callback when the deadline changes, so if we fired a hair early our
 * copy would otherwise be lost.
 */
static void
fire_timer(JfHttp *h)
{
	int			running;
	long		ms = -1;

	curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	if (curl_multi_timeout(h->multi, &ms) == CURLM_OK)
	{
		h->timer_set = ms >= 0;
		if (ms >= 0)
			h->timer_deadline_us = now_mono_us() + (int64_t) ms * 1000;
	}
}

/*
 * All of curl's work happens here.  Signals are blocked meanwhile because
 * this is where curl's threaded resolver starts its threads, which inherit
 * our mask: with everything blocked, the backend's signal handlers only
 * ever run on the backend's own thread.  Pending signals are delivered on
 * return; nothing here blocks, so that is soon.
 */
void
jf_http_perform(JfHttp *h)
{
	struct epoll_event evs[JF_EPOLL_BATCH];
	int			running;
	sigset_t	all,
				old;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);

	/* socket activity, in bounded batches so one call stays short */
	for (int round = 0; round < 8; round++)
	{
		int			n = epoll_wait(h->epfd, evs, JF_EPOLL_BATCH, 0);

		for (int i = 0; i < n; i++)
		{
			uint32_t	ev = evs[i].events;
			int			mask = 0;

			if (ev & (EPOLLIN | EPOLLHUP | EPOLLRDHUP))
				mask |= CURL_CSELECT_IN;
			if (ev & EPOLLOUT)
				mask |= CURL_CSELECT_OUT;
			if (ev & EPOLLERR)
				mask |= CURL_CSELECT_ERR;
			curl_multi_socket_action(h->multi, evs[i].data.fd, mask, &running);
		}
		if (n < JF_EPOLL_BATCH)
			break;
	}
	drain_messages(h);
	start_queued(h);

	/*
	 * Timers; starting a request arms a 0 ms timer, so go round a few times
	 * to get fresh requests connecting without another trip through the
	 * caller's wait loop.
	 */
	for (int round = 0; round < 4; round++)
	{
		if (!h->timer_set || h->timer_deadline_us > now_mono_us())
			break;
		fire_timer(h);
		drain_messages(h);
		start_queued(h);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int
jf_http_fd(const JfHttp *h)
{
	return h->epfd;
}

long
jf_http_timeout_ms(const JfHttp *h)
{
	int64_t		rem;

	if (h->done_head)
		return 0;
	if (!h->timer_set)
		return -1;
	rem = h->timer_deadline_us - now_mono_us();
	if (rem <= 0)
		return 0;
	return (long) ((rem + 999) / 1000);
}

bool
jf_http_next_result(JfHttp *h, JfHttpResult *out)
{
	JfReq	   *r = h->done_head;

	if (r == NULL)
		return false;
	h->done_head = r->next;
	if (h->done_head == NULL)
		h->done_tail = NULL;
	*out = r->res;
	req_free(r, false);
	return true;
}

void
jf_http_result_free(JfHttpResult *r)
{
	if (r)
	{
		free(r->body);
		r->body = NULL;
		r->body_len = 0;
	}
}

int
jf_http_in_flight(const JfHttp *h)
{
	return h->nactive;
}

int
jf_http_queued(const JfHttp *h)
{
	return h->nqueued;
}

/* ---------------------------------------------------------------------
 * Life cycle and configuration
 * ---------------------------------------------------------------------
 */

/* Validate and copy cfg into h; on OOM leave h untouched. */
static bool
apply_config(JfHttp *h, const JfHttpConfig *cfg)
{
	char	   *ua,
			   *proxy;

	if (!dup_opt(cfg->user_agent, &ua))
		return false;
	if (!dup_opt(cfg->proxy, &proxy))
	{
		free(ua);
		return false;
	}
	free(h->user_agent);
	free(h->proxy);
	h->user_agent = ua;
	h->proxy = proxy;
	h->max_concurrent = cfg->max_concurrent > 0 ? cfg->max_concurrent : 1;
	h->max_per_host = cfg->max_per_host > 0 ? cfg->max_per_host : 1;
	h->max_response_bytes = cfg->max_response_bytes;
	h->max_redirects = cfg->max_redirects > 0 ? cfg->max_redirects : 0;
	/* bound idle cached connections (and so open fds) too */
	curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, (long) h->max_concurrent);
	return true;
}

JfHttp *
jf_http_create(const JfHttpConfig *cfg, char *errbuf, size_t errlen)
{
	JfHttp	   *h = calloc(1, sizeof(JfHttp));

	if (h == NULL)
	{
		set_err(errbuf, errlen, "out of memory");
		return NULL;
	}
	h->epfd = -1;
	h->nbuckets = 64;
	h->buckets = calloc(h->nbuckets, sizeof(JfHost *));
	h->multi = curl_multi_init();
	if (h->buckets == NULL || h->multi == NULL)
	{
		set_err(errbuf, errlen, "out of memory");
		goto fail;
	}
	h->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (h->epfd < 0)
	{
		if (errbuf && errlen > 0)
			snprintf(errbuf, errlen, "epoll_create1: %s", strerror(errno));
		goto fail;
	}
	if (curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, sock_cb) != CURLM_OK ||
		curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h) != CURLM_OK ||
		curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, timer_cb) != CURLM_OK ||
		curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h) != CURLM_OK)
	{
		set_err(errbuf, errlen, "could not configure the curl multi handle");
		goto fail;
	}
	if (!apply_config(h, cfg))
	{
		set_err(errbuf, errlen, "out of memory");
		goto fail;
	}
	return h;

fail:
	if (h->multi)
		curl_multi_cleanup(h->multi);
	if (h->epfd >= 0)
		close(h->epfd);
	free(h->buckets);
	free(h);
	return NULL;
}

bool
jf_http_set_config(JfHttp *h, const JfHttpConfig *cfg)
{
	if (!apply_config(h, cfg))
		return false;
	/* the per-host cap decides heap membership: re-check every host */
	for (size_t i = 0; i < h->nbuckets; i++)
		for (JfHost *x = h->buckets[i]; x; x = x->hnext)
			heap_fix(h, x);
	start_queued(h);
	return true;
}

void
jf_http_destroy(JfHttp *h)
{
	if (h == NULL)
		return;
	while (h->active)
	{
		JfReq	   *r = h->active;

		h->active = r->next;
		curl_multi_remove_handle(h->multi, r->easy);
		curl_easy_cleanup(r->easy);
		req_free(r, true);
	}
	for (size_t i = 0; i < h->nbuckets; i++)
	{
		JfHost	   *x = h->buckets[i];

		while (x)
		{
			JfHost	   *next = x->hnext;

			while (x->head)
			{
				JfReq	   *r = x->head;

				x->head = r->next;
				req_free(r, true);
			}
			free(x);
			x = next;
		}
	}
	while (h->done_head)
	{
		JfReq	   *r = h->done_head;

		h->done_head = r->next;
		req_free(r, true);
	}
	for (int i = 0; i < h->npool; i++)
		curl_easy_cleanup(h->pool[i]);
	/* closes cached connections, which still talks to our epoll fd */
	curl_multi_cleanup(h->multi);
	close(h->epfd);
	free(h->buckets);
	free(h->heap);
	free(h->user_agent);
	free(h->proxy);
	free(h);
}
