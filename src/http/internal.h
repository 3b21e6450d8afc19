/*-------------------------------------------------------------------------
 *
 * internal.h
 *	  What the files of jobflow's HTTP dispatcher share (not installed).
 *
 * The dispatcher is one module in five files:
 *
 *	http.c			the public API: life cycle, submission, driving curl's
 *					multi handle through epoll, handing out results
 *	request.c		one request: copying and checking it, setting up its
 *					easy handle, curl's data callbacks, turning the
 *					outcome into a result
 *	networks.c		the denied and allowed networks, and the checks of
 *					an address against them
 *	queue.c			admission: per-host FIFOs of waiting requests and the
 *					heap of hosts that can start one
 *	sockets.c		the sockets of idle kept connections, to tell at
 *					reuse whether the server has closed one meanwhile
 *
 * Only these files include this header; the worker sees http.h alone.
 * Functions shared between the files are prefixed jf_http_ (jf_http_req_
 * and jf_http_queue_ for those of request.c and queue.c), the module's
 * only global symbols besides its API.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_HTTP_INTERNAL_H
#define JF_HTTP_INTERNAL_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "http/http.h"

#define JF_EASY_POOL_MAX	256

/* defined in queue.c; the other files only pass it around */
typedef struct JfHost JfHost;

/* defined in sockets.c */
typedef struct JfSocketEntry JfSocketEntry;
typedef struct JfSocketTuple JfSocketTuple;

/* One entry of deny_networks or allow_networks: an address prefix. */
typedef struct JfNet
{
	int			family;			/* AF_INET or AF_INET6 */
	int			bits;
	int			port;			/* 0: any port */
	unsigned char addr[16];
} JfNet;

/* Why prereq_cb stopped a transfer (besides the address lists). */
typedef enum JfRefused
{
	JF_REFUSED_NONE = 0,
	JF_REFUSED_RESEND,			/* curl's silent re-send after no answer */
	JF_REFUSED_STALE,			/* a reused connection the server closed:
								 * nothing was sent, start again */
	JF_REFUSED_CROSS_ORIGIN,	/* a redirect to another origin */
	JF_REFUSED_CROSS_ORIGIN_BODY,	/* the same, allowed, but with a body */
	JF_REFUSED_CROSS_ORIGIN_CERT	/* the same, by a request that presents a
									 * client certificate: refused before
									 * the connection is made */
} JfRefused;

/* most bytes of response headers, 1xx responses and trailers read */
#define JF_HTTP_MAX_HEADER_BYTES (256 * 1024)

typedef struct JfReq
{
	struct JfReq *next;			/* host FIFO, active list or result FIFO */
	struct JfReq *prev;			/* active list only */
	uint64_t	seq;			/* submission order */
	JfHost	   *host;			/* NULL once released or if never queued */
	CURL	   *easy;
	uint32_t	easy_gen;		/* the config_gen easy is configured for */
	bool		easy_ok;		/* its transfer ended well: keep its setup */
	char	   *url;
	CURLU	   *uh;				/* url, parsed (CURLOPT_CURLU) */
	const char *method;			/* static canonical name */
	struct curl_slist *headers;
	struct curl_slist *own_headers; /* jobflow's alone, for other origins */
	char	   *origin;			/* scheme://host:port of url */
	char	   *body;
	size_t		body_len;
	int			timeout_ms;
	char	   *secret_user;	/* URL credentials, only to scrub errors */
	char	   *secret_pass;
	char	   *client_cert;	/* PEM, for CURLOPT_SSLCERT_BLOB; NULL: none */
	size_t		client_cert_len;
	char	   *client_key;		/* PEM, for CURLOPT_SSLKEY_BLOB; wiped */
	size_t		client_key_len;
	size_t		max_body;		/* excerpt cap, fixed when started */
	size_t		buf_cap;
	char		errbuf[CURL_ERROR_SIZE];
	struct JfHttp *http;		/* for the connect-time address check */
	bool		denied;			/* a connection was refused by its address */
	bool		tried_allowed;	/* and another of the hop's was allowed */
	size_t		header_bytes;	/* response headers (and trailers) so far */
	bool		headers_cut;	/* header_cb stopped the transfer */
	bool		cut;			/* write_cb stopped the transfer: the
								 * excerpt was full */
	JfRefused	refused;		/* a request was refused by prereq_cb */
	int			sends;			/* requests sent in this transfer so far */
	bool		answered;		/* a response began since the last send */
	int			restarts;		/* starts again after a stale connection */
	bool		fresh;			/* the next start needs a new connection */
	JfHttpResult res;
} JfReq;

/*
 * What the epoll mirror knows of one file descriptor (http.c, sock_cb).
 * JF_FD_OURS marks a socket opened by open_socket_cb and not yet closed
 * by close_socket_cb (both in request.c): only such a socket may stay in
 * the epoll set while curl does not watch it (JF_FD_IDLE), since its
 * closing is seen.
 */
#define JF_FD_IN		0x01	/* in the epoll set for EPOLLIN */
#define JF_FD_OUT		0x02	/* and/or for EPOLLOUT */
#define JF_FD_REG		0x04	/* in the epoll set */
#define JF_FD_IDLE		0x08	/* kept there, but curl does not watch it */
#define JF_FD_OURS		0x10

/*
 * A URL parsed lately, to copy rather than parse again (request.c): many
 * tasks call the same URL.  Never one with credentials.
 */
#define JF_URL_MEMO			16	/* power of two */

typedef struct JfUrlMemo
{
	char	   *url;			/* the text as submitted; NULL: empty */
	CURLU	   *uh;				/* its parse */
	char	   *key;			/* its host key */
} JfUrlMemo;

struct JfHttp
{
	CURLM	   *multi;
	int			epfd;
	uint8_t    *fds;			/* JF_FD_* flags by descriptor */
	int			nfds;			/* entries in fds */
	int			max_concurrent;
	int			max_per_host;
	size_t		max_response_bytes;
	int			max_redirects;
	bool		follow_cross_origin;
	struct curl_slist *resolve;	/* CURLOPT_RESOLVE entries, or NULL */
	char	   *user_agent;
	char	   *proxy;
	char	   *doh_url;		/* NULL: the system's resolver */
	char	   *ca_file;		/* NULL: libcurl's default CA bundle */
	char	   *ca_path;		/* NULL: no CA directory of the setting's */
	bool		no_capath;		/* no CA directory, only a bundle: see
								 * request.c */
	CURLSH	   *share;			/* TLS sessions, for every handle */
	bool		h2_uploads;		/* libcurl's HTTP/2 uploads are sound (8.3+) */
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
	CURL	   *pool[JF_EASY_POOL_MAX];	/* idle handles, configured ... */
	uint32_t	pool_gen[JF_EASY_POOL_MAX];	/* ... for this config_gen */
	int			npool;
	uint32_t	config_gen;		/* bumped by each configuration */
	long		http_version;	/* libcurl's default CURLOPT_HTTP_VERSION */
	JfNet	   *deny;			/* deny_networks, parsed */
	int			ndeny;
	JfNet	   *allow;			/* allow_networks, parsed */
	int			nallow;
	JfSocketEntry *sockets;		/* idle kept connections (sockets.c) */
	size_t		sockets_cap;	/* power of two, or 0 */
	size_t		nsockets;
	JfSocketTuple *socket_tuples;	/* their ends, by socket number */
	size_t		socket_tuples_cap;
	uint64_t	stale_restarts; /* requests started again (see above) */
	JfUrlMemo	urls[JF_URL_MEMO];	/* by jf_hash_string(url) */
};

/*
 * Curl's timer is kept as a monotonic deadline; result timestamps are wall
 * clock, as the worker logs them.
 */
static inline int64_t
jf_http_now_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t
jf_http_now_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* strdup that maps NULL to NULL, so callers can tell OOM from "unset". */
static inline bool
jf_http_dup_opt(const char *s, char **out)
{
	*out = NULL;
	if (s == NULL)
		return true;
	*out = strdup(s);
	return *out != NULL;
}

/* request.c */
extern const char *jf_http_req_prepare(JfHttp *h, JfReq *r,
									   const JfHttpRequest *req,
									   char **key, bool *oom);
extern void jf_http_req_start(JfHttp *h, JfReq *r);
extern void jf_http_req_complete(JfHttp *h, JfReq *r, CURLcode rc);
extern void jf_http_req_set_error(JfReq *r, int kind, const char *msg);
extern void jf_http_req_done(JfHttp *h, JfReq *r);
extern void jf_http_req_free(JfReq *r, bool with_result_body);
extern void jf_http_url_memo_clear(JfHttp *h);
extern uint8_t *jf_http_fd_flags(JfHttp *h, curl_socket_t s);

/* sockets.c */
extern void jf_http_sockets_kept(JfHttp *h, CURL *e);
extern void jf_http_sockets_forget(JfHttp *h, curl_socket_t fd);
extern bool jf_http_sockets_closed_by_peer(JfHttp *h,
										   const char *local_ip, int local_port,
										   const char *remote_ip, int remote_port,
										   bool *multiplexed);
extern void jf_http_sockets_destroy(JfHttp *h);

/* networks.c: whether curl's socket address is denied */
struct sockaddr;
extern bool jf_http_sockaddr_denied(const JfHttp *h, const struct sockaddr *sa);

extern bool jf_http_parse_networks(const char *list, JfNet **out, int *n,
								   char *errbuf, size_t errlen);

/* queue.c */
extern bool jf_http_queue_init(JfHttp *h);
extern JfReq *jf_http_queue_destroy(JfHttp *h);
extern bool jf_http_queue_push(JfHttp *h, JfReq *r, const char *key);
extern JfReq *jf_http_queue_pop(JfHttp *h);
extern void jf_http_queue_release(JfHttp *h, JfReq *r);
extern void jf_http_queue_recheck(JfHttp *h);

#endif							/* JF_HTTP_INTERNAL_H */
