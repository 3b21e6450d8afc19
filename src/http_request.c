/*-------------------------------------------------------------------------
 *
 * http_request.c
 *	  One request of jobflow's HTTP dispatcher, from submission to result.
 *
 * A submitted request is copied and checked here (method, headers, URL;
 * the host key used for admission is derived from the URL), its easy
 * handle is set up when it starts, curl's data callbacks fill in its
 * result, and when it ends it moves to the dispatcher's result FIFO.
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
#include <sys/socket.h>

#include "http_internal.h"

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
	curl_slist_free_all(r->headers);
	free(r->body);
	free(r->secret_user);
	free(r->secret_pass);
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

/* Reusing a reset easy handle saves its allocation and setup per request. */
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
 * its host slot.  Callers start queued requests afterwards.
 */
static void
finish_req(JfHttp *h, JfReq *r)
{
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
	jf_http_queue_release(h, r);
	if (r->res.body)
		r->res.body[r->res.body_len] = '\0';
	r->res.finished_at_ms = jf_http_now_wall_ms();
	/* drop what only the transfer needed */
	free(r->body);
	r->body = NULL;
	curl_slist_free_all(r->headers);
	r->headers = NULL;
	jf_http_req_done(h, r);
}

/* ---------------------------------------------------------------------
 * Denied networks
 * ---------------------------------------------------------------------
 */

static void
net_error(char *errbuf, size_t errlen, const char *what, const char *item, size_t len)
{
	if (errbuf && errlen > 0)
		snprintf(errbuf, errlen, "%s: \"%.*s\"", what, (int) (len > 64 ? 64 : len), item);
}

/*
 * Parse "addr[/bits], ..." into prefixes.  NULL or blank gives none.  A
 * malformed entry fails the whole list, with the entry in errbuf.
 */
bool
jf_http_parse_networks(const char *list, JfNet **out, int *n, char *errbuf, size_t errlen)
{
	const char *p = list ? list : "";
	int			cap = 0;
	JfNet	   *nets = NULL;

	*out = NULL;
	*n = 0;
	for (;;)
	{
		char		item[INET6_ADDRSTRLEN + 8];
		const char *start;
		size_t		len;
		char	   *slash;
		JfNet		net;
		int			maxbits;

		while (*p == ',' || isspace((unsigned char) *p))
			p++;
		if (*p == '\0')
			break;
		start = p;
		while (*p && *p != ',' && !isspace((unsigned char) *p))
			p++;
		len = (size_t) (p - start);
		if (len >= sizeof(item))
		{
			net_error(errbuf, errlen, "entry too long", start, len);
			free(nets);
			return false;
		}
		memcpy(item, start, len);
		item[len] = '\0';
		memset(&net, 0, sizeof(net));
		slash = strchr(item, '/');
		if (slash)
			*slash = '\0';
		if (inet_pton(AF_INET, item, net.addr) == 1)
			net.family = AF_INET, maxbits = 32;
		else if (inet_pton(AF_INET6, item, net.addr) == 1)
			net.family = AF_INET6, maxbits = 128;
		else
		{
			net_error(errbuf, errlen, "entry that is not an address", start, len);
			free(nets);
			return false;
		}
		net.bits = maxbits;
		if (slash)
		{
			char	   *end;
			long		bits = strtol(slash + 1, &end, 10);

			if (end == slash + 1 || *end != '\0' || bits < 0 || bits > maxbits)
			{
				net_error(errbuf, errlen, "entry with an invalid prefix length", start, len);
				free(nets);
				return false;
			}
			net.bits = (int) bits;
		}
		if (*n == cap)
		{
			JfNet	   *more;

			cap = cap ? cap * 2 : 8;
			more = realloc(nets, sizeof(JfNet) * cap);
			if (more == NULL)
			{
				if (errbuf && errlen > 0)
					snprintf(errbuf, errlen, "out of memory");
				free(nets);
				return false;
			}
			nets = more;
		}
		nets[(*n)++] = net;
	}
	*out = nets;
	return true;
}

bool
jf_http_check_networks(const char *list, char *errbuf, size_t errlen)
{
	JfNet	   *nets;
	int			n;

	if (!jf_http_parse_networks(list, &nets, &n, errbuf, errlen))
		return false;
	free(nets);
	return true;
}

static bool
prefix_match(const unsigned char *addr, const JfNet *net)
{
	int			full = net->bits / 8;
	int			rest = net->bits % 8;

	if (memcmp(addr, net->addr, full) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((addr[full] ^ net->addr[full]) & (0xFF << (8 - rest))) == 0;
}

/* IPv4-mapped IPv6 addresses are checked as the IPv4 address they carry. */
static bool
address_denied(const JfHttp *h, const struct sockaddr *sa)
{
	const unsigned char *v4 = NULL;
	const unsigned char *v6 = NULL;

	if (sa->sa_family == AF_INET)
		v4 = (const unsigned char *) &((const struct sockaddr_in *) sa)->sin_addr;
	else if (sa->sa_family == AF_INET6)
	{
		const struct in6_addr *a = &((const struct sockaddr_in6 *) sa)->sin6_addr;

		v6 = (const unsigned char *) a;
		if (IN6_IS_ADDR_V4MAPPED(a))
			v4 = v6 + 12;
	}
	for (int i = 0; i < h->ndeny; i++)
	{
		const JfNet *net = &h->deny[i];

		if ((net->family == AF_INET && v4 && prefix_match(v4, net)) ||
			(net->family == AF_INET6 && v6 && prefix_match(v6, net)))
			return true;
	}
	return false;
}

/*
 * Every connection curl opens passes here, after DNS and for each redirect
 * hop, so a host name that resolves to a denied address is refused too.
 */
static curl_socket_t
open_socket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *address)
{
	JfReq	   *r = clientp;

	if (purpose == CURLSOCKTYPE_IPCXN && address_denied(r->http, &address->addr))
	{
		r->denied = true;
		return CURL_SOCKET_BAD;
	}
	return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

/* Turn a finished transfer's outcome into the result fields. */
void
jf_http_req_complete(JfHttp *h, JfReq *r, CURLcode rc)
{
	long		status = 0;

	curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
	r->res.http_status = (int) status;
	r->res.curl_code = (int) rc;
	if (rc == CURLE_OK)
		r->res.error_kind = JF_HTTP_OK;
	else if (r->denied && rc == CURLE_COULDNT_CONNECT)
		jf_http_req_set_error(r, JF_HTTP_INVALID,
							  "connection refused by jobflow: the host's address is in deny_networks");
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
		jf_http_req_set_error(r, kind, r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc));
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
void
jf_http_req_start(JfHttp *h, JfReq *r)
{
	CURL	   *e;
	bool		has_body = r->body_len > 0;

	r->res.started_at_ms = jf_http_now_wall_ms();
	e = h->npool > 0 ? h->pool[--h->npool] : curl_easy_init();
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
	SETOPT(CURLOPT_OPENSOCKETFUNCTION, open_socket_cb);
	SETOPT(CURLOPT_OPENSOCKETDATA, r);
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
	curl_url_cleanup(u);
	return problem;
}

/* Copy the request into r; same contract as parse_url(). */
const char *
jf_http_req_prepare(JfReq *r, const JfHttpRequest *req, char **key, bool *oom)
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
