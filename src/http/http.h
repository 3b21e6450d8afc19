/*-------------------------------------------------------------------------
 *
 * http.h
 *	  Non-blocking HTTP dispatcher for jobflow's worker (libcurl multi).
 *
 * The worker owns one JfHttp.  It hands it requests with jf_http_submit()
 * and drives it from its own wait loop:
 *
 *		wait until jf_http_fd() is readable, or the latch is set, or
 *		min(own deadline, jf_http_timeout_ms()) has passed;
 *		jf_http_perform(h);
 *		while (jf_http_next_result(h, &r)) { use r; jf_http_result_free(&r); }
 *
 * jf_http_fd() is an epoll fd owned by the dispatcher; it becomes readable
 * when any of curl's sockets has activity.  Nothing here ever blocks.
 *
 * Requests beyond max_concurrent (global) or max_per_host (per
 * scheme://host:port) wait in the dispatcher's own FIFO, not inside curl,
 * so time spent queued does not count against a request's timeout_ms.  A
 * host that is saturated (dead, slow) never delays requests to other hosts;
 * among startable requests, submission order is kept.
 *
 * Plain C, no PostgreSQL headers.  Not thread-safe: use a JfHttp from one
 * thread only.  Call jf_http_global_init() once per process before
 * jf_http_create() (in the worker, after fork, not in the postmaster).
 *
 * libcurl here resolves names on short-lived threads (threaded resolver);
 * they are started only inside jf_http_perform(), which blocks all signals
 * while it runs so that those threads never run the backend's handlers.
 * Each request in flight holds a socket, and idle connections are cached
 * (at most max_concurrent of them): size RLIMIT_NOFILE accordingly.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_HTTP_H
#define JF_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Result error kinds.  An HTTP error status (4xx/5xx) is JF_HTTP_OK. */
typedef enum JfHttpErrorKind
{
	JF_HTTP_OK = 0,				/* a response was received (any status) */
	JF_HTTP_INVALID,			/* rejected before sending: bad URL, scheme,
								 * method or header, or a denied address;
								 * retrying cannot help */
	JF_HTTP_CONNECT,			/* DNS failure, connection refused/unreachable */
	JF_HTTP_TIMEOUT,			/* timeout_ms elapsed (any phase) */
	JF_HTTP_OTHER,				/* anything else: TLS, protocol, reset, OOM... */
	JF_HTTP_NO_ANSWER,			/* the request was sent but the connection
								 * closed without a byte of answer: it may
								 * have been delivered.  Never re-sent
								 * within the same request. */
	JF_HTTP_REDIRECT			/* a redirect not followed: too many, to
								 * another scheme, or to another origin
								 * while that is not allowed */
} JfHttpErrorKind;

/*
 * What a finished request counts as in the metrics: the class of its
 * status, or what kept it from an answer.  Every result lands in exactly
 * one class (jf_http_result_class); see docs/operations.md, "Metrics".
 */
typedef enum JfHttpClass
{
	JF_CLASS_2XX,
	JF_CLASS_3XX,
	JF_CLASS_4XX,
	JF_CLASS_5XX,
	JF_CLASS_TIMEOUT,			/* timeout_ms elapsed, in any phase */
	JF_CLASS_CONNECT,			/* refused or unreachable */
	JF_CLASS_DNS,				/* the name (or the proxy's) did not resolve */
	JF_CLASS_TLS,				/* handshake, certificate or other TLS failure */
	JF_CLASS_DENIED,			/* refused before sending: a denied address
								 * or an invalid request */
	JF_CLASS_NO_ANSWER,
	JF_CLASS_REDIRECT,			/* a redirect not followed */
	JF_CLASS_OTHER,				/* protocol errors, resets, a status under
								 * 200, out of memory... */
	JF_NCLASS
} JfHttpClass;

typedef struct JfHttp JfHttp;

typedef struct JfHttpConfig
{
	int			max_concurrent; /* global cap on requests in flight (>= 1) */
	int			max_per_host;	/* cap per scheme://host:port (>= 1) */
	size_t		max_response_bytes; /* body excerpt kept; once more than
									 * that has come, the transfer ends
									 * there (an HTTP/1 connection is
									 * closed) and the result is the
									 * response's, with body_truncated
									 * set */
	int			max_redirects;	/* 0 = do not follow redirects */
	bool		follow_cross_origin;	/* follow redirects to another
										 * scheme://host:port, sending only
										 * jobflow's own headers and only if
										 * the request has no body; false =
										 * such a redirect is an error */
	const char *user_agent;		/* e.g. "jobflow/0.1"; NULL = none */
	const char *proxy;			/* NULL or "" = no proxy; proxy environment
								 * variables are always ignored */
	const char *deny_networks;	/* NULL or "": none; else a list of
								 * entries separated by commas or blanks:
								 * addr[/bits][:port], IPv6 between
								 * brackets when a port follows
								 * ([addr][/bits][:port]); connections to
								 * them (to that port only, if one is
								 * given) are refused, whatever the URL's
								 * host name (checked at connect time, so
								 * redirects and DNS answers are covered,
								 * and again before each request on a
								 * reused connection).  Unspecified
								 * addresses (0.0.0.0/8, ::) are always
								 * refused, and IPv6 forms that carry an
								 * IPv4 address are checked as that too */
	const char *allow_networks; /* NULL or "": none; else entries as in
								 * deny_networks: a connection they cover
								 * is permitted even though deny_networks
								 * covers it too (never to an unspecified
								 * address).  Each address a connection
								 * reaches (an IPv6 address and the IPv4
								 * addresses it carries) must be denied by
								 * no entry or allowed by one */
	const char *const *resolve; /* NULL, or NULL-terminated "host:port:addr"
								 * entries (CURLOPT_RESOLVE): fixed answers
								 * instead of DNS, for tests */
	const char *doh_url;		/* NULL or "": the system's resolver; else
								 * names are resolved by DNS over HTTPS at
								 * this URL (CURLOPT_DOH_URL), for tests */
	const char *ca_file;		/* NULL or "": libcurl's default CA bundle;
								 * else the PEM file of the certificate
								 * authorities trusted for https */
	const char *ca_path;		/* NULL or "": none; else a directory of
								 * such certificates, hashed as OpenSSL's
								 * c_rehash names them (CURLOPT_CAPATH);
								 * with ca_path and no ca_file, libcurl's
								 * default bundle is not trusted */
} JfHttpConfig;

typedef struct JfHttpRequest
{
	int64_t		task_id;		/* echoed back, and sent as X-Jobflow-Task-Id */
	int32_t		attempt;		/* echoed back, and sent as X-Jobflow-Attempt */
	void	   *user;			/* echoed back untouched */
	const char *url;			/* http:// or https:// only */
	const char *method;			/* GET POST PUT PATCH DELETE HEAD OPTIONS
								 * (case-insensitive) */
	const char *const *headers; /* "Name: value" lines; Expect and
								 * X-Jobflow-* lines given here are dropped */
	int			nheaders;
	const char *body;			/* may be NULL; sent for any method but HEAD */
	size_t		body_len;
	int			timeout_ms;		/* whole request, counted from when it
								 * starts (not from submission); <= 0 means
								 * no timeout */
	const char *client_cert;	/* NULL, or the PEM certificate (chain) to
								 * present for mutual TLS, from memory */
	size_t		client_cert_len;
	const char *client_key;		/* its PEM private key: copied, wiped when
								 * the request ends, never in a result */
	size_t		client_key_len;
} JfHttpRequest;

typedef struct JfHttpResult
{
	int64_t		task_id;
	int32_t		attempt;
	void	   *user;
	int			http_status;	/* status of the final response; 0 if none */
	int			error_kind;		/* a JfHttpErrorKind */
	int			curl_code;		/* CURLcode, 0 if none (for logs only) */
	char		error[256];		/* error text, "" if none; never holds the
								 * URL nor its credentials */
	char	   *body;			/* response excerpt, malloc'd and
								 * NUL-terminated; NULL if no body */
	size_t		body_len;		/* bytes in body (<= max_response_bytes) */
	bool		body_truncated; /* the response had more than body_len */
	int64_t		retry_after_ms; /* Retry-After of the final response
								 * (delta-seconds or HTTP-date, clamped at
								 * 0), -1 if absent or invalid */
	int64_t		queued_at_ms;	/* wall clock (CLOCK_REALTIME) ms since epoch */
	int64_t		started_at_ms;	/* = queued_at_ms if it never started */
	int64_t		finished_at_ms;
} JfHttpResult;

/* Once per process, before any other call (not thread-safe, like curl's). */
extern bool jf_http_global_init(char *errbuf, size_t errlen);
extern void jf_http_global_cleanup(void);

/*
 * What a dispatcher refuses unless told otherwise (jobflow.deny_networks'
 * default): loopback, private, link-local, unique-local, shared (CGNAT),
 * NAT64, multicast and reserved (broadcast included) networks, and cloud
 * metadata addresses (some already inside those).  A callback reaches a
 * public address only, unless allow_networks says otherwise.
 */
#define JF_HTTP_DEFAULT_DENY_NETWORKS \
	"127.0.0.0/8, ::1/128, " \
	"10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, " \
	"169.254.0.0/16, fe80::/10, " \
	"fc00::/7, " \
	"100.64.0.0/10, " \
	"64:ff9b::/96, 64:ff9b:1::/48, " \
	"224.0.0.0/4, ff00::/8, " \
	"240.0.0.0/4, " \
	"fd00:ec2::254/128, 100.100.100.200/32"

/*
 * Whether list is a valid deny_networks or allow_networks value; if not,
 * why in errbuf.
 */
extern bool jf_http_check_networks(const char *list, char *errbuf,
								   size_t errlen);

/*
 * Whether a connection to this numeric IPv4/IPv6 address and TCP port
 * would be refused under h's settings (deny_networks, allow_networks,
 * unspecified addresses, IPv4 carried in IPv6); text that is not an
 * address counts as refused.
 */
/*
 * Whether a connection from local to primary (curl's numeric addresses)
 * reached this host through an address of its own, and is refused as
 * loopback would be.
 */
extern bool jf_http_own_host_denied(const JfHttp *h, const char *primary,
									const char *local, int port);
extern bool jf_http_address_denied(const JfHttp *h, const char *address,
								   int port);

/* NULL on failure, with a message in errbuf. */
extern JfHttp *jf_http_create(const JfHttpConfig *cfg, char *errbuf,
							  size_t errlen);

/* Aborts everything in flight or queued (no results) and frees all. */
extern void jf_http_destroy(JfHttp *h);

/*
 * Copies everything it needs from req.  false only on out-of-memory (the
 * request was not taken).  An invalid request is taken and produces a
 * JF_HTTP_INVALID result.
 */
extern bool jf_http_submit(JfHttp *h, const JfHttpRequest *req);

/* The epoll fd to wait on for readability (stable for h's lifetime). */
extern int	jf_http_fd(const JfHttp *h);

/*
 * Milliseconds until jf_http_perform() must be called even if the fd stays
 * quiet; -1 = no timer.  0 also when results are waiting to be popped.
 */
extern long jf_http_timeout_ms(const JfHttp *h);

/* Handle socket activity and timers, start queued requests.  Never blocks. */
extern void jf_http_perform(JfHttp *h);

/* Pops one finished result; free it with jf_http_result_free(). */
extern bool jf_http_next_result(JfHttp *h, JfHttpResult *out);
extern void jf_http_result_free(JfHttpResult *r);

/* The metrics class of a result, and its label ("2xx", "dns", ...). */
extern JfHttpClass jf_http_result_class(const JfHttpResult *r);
extern const char *jf_http_class_name(JfHttpClass c);

/*
 * Calls fn(user, arg) for every request still waiting in the dispatcher's
 * queues, that is, never sent; nothing is removed.  For a caller about to
 * destroy the dispatcher that must tell unsent requests from those that may
 * have reached their receiver.
 */
extern void jf_http_foreach_queued(const JfHttp *h,
								   void (*fn) (void *user, void *arg),
								   void *arg);

extern int	jf_http_in_flight(const JfHttp *h);
extern int	jf_http_queued(const JfHttp *h);

/*
 * Requests started again, since the dispatcher was created, because the
 * pooled connection they were about to use had been closed by its server
 * (nothing had been sent on it).
 */
extern uint64_t jf_http_stale_restarts(const JfHttp *h);

/*
 * New caps/settings (e.g. on SIGHUP).  Caps apply at once (raising them
 * starts queued requests; lowering them never aborts anything); the other
 * settings apply to requests started afterwards.  false on OOM (the old
 * settings stay).
 */
extern bool jf_http_set_config(JfHttp *h, const JfHttpConfig *cfg);

#endif							/* JF_HTTP_H */
