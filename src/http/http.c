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
 * FIFO until both the global cap and its host's cap allow it, and only
 * then is its easy handle added to the multi handle, so CURLOPT_TIMEOUT_MS
 * counts from the real start (queue.c).  Finished requests move to a
 * result FIFO (request.c, which also sets up each transfer; networks.c
 * checks every connection's address).  This
 * file holds the public API: life cycle, submission, driving curl and
 * handing out results.  Connections and DNS entries are cached by the
 * multi handle.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "http/internal.h"

#define JF_EPOLL_BATCH		256

/* Callers may pass no buffer; messages are cut to fit. */
static void
set_err(char *errbuf, size_t errlen, const char *msg)
{
	if (errbuf && errlen > 0)
		snprintf(errbuf, errlen, "%s", msg);
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

/* Only at process exit, after every dispatcher is destroyed. */
void
jf_http_global_cleanup(void)
{
	curl_global_cleanup();
}

/*
 * Mirror curl's interest in a socket into our epoll set, with as few
 * epoll_ctl calls as we can: curl drops a connection's socket (REMOVE)
 * when its transfer ends and adds it back when the next transfer reuses
 * the connection, with the same interest (reading the answer), so a socket
 * of ours that only waited for input stays in the set meanwhile
 * (JF_FD_IDLE); an event on it then takes it out (jf_http_perform), and so
 * does its closing.  Unchanged interest costs no call either.  Descriptors
 * the table cannot hold, or not opened by us (the resolver's), are handled
 * call by call.
 */
static int
sock_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
	JfHttp	   *h = userp;
	uint8_t    *f = jf_http_fd_flags(h, s);
	uint8_t		want;
	struct epoll_event ev;

	(void) e;
	(void) socketp;
	if (what == CURL_POLL_REMOVE)
	{
		if (f == NULL)
			epoll_ctl(h->epfd, EPOLL_CTL_DEL, s, NULL);
		else if ((*f & (JF_FD_OURS | JF_FD_REG | JF_FD_IN | JF_FD_OUT)) ==
				 (JF_FD_OURS | JF_FD_REG | JF_FD_IN))
			*f |= JF_FD_IDLE;
		else if ((*f & JF_FD_REG) && epoll_ctl(h->epfd, EPOLL_CTL_DEL, s, NULL) != 0)
		{
			/*
			 * Closed without our close callback (curl closes an attempt
			 * still connecting that way): whatever gets the number next is
			 * not known to be ours.
			 */
			*f = 0;
		}
		else
			*f &= JF_FD_OURS;
		return 0;
	}
	want = ((what & CURL_POLL_IN) ? JF_FD_IN : 0) |
		((what & CURL_POLL_OUT) ? JF_FD_OUT : 0);
	if (f)
	{
		*f &= ~JF_FD_IDLE;
		if ((*f & JF_FD_REG) && (*f & (JF_FD_IN | JF_FD_OUT)) == want)
			return 0;
	}
	memset(&ev, 0, sizeof(ev));
	ev.events = ((want & JF_FD_IN) ? EPOLLIN : 0) | ((want & JF_FD_OUT) ? EPOLLOUT : 0);
	ev.data.fd = s;
	if (f && (*f & JF_FD_REG))
	{
		if (epoll_ctl(h->epfd, EPOLL_CTL_MOD, s, &ev) != 0)
		{
			/* the file we registered was closed behind our back */
			if (errno != ENOENT || epoll_ctl(h->epfd, EPOLL_CTL_ADD, s, &ev) != 0)
				return -1;
			*f = 0;
		}
	}
	else
	{
		if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, s, &ev) != 0 &&
			(errno != EEXIST || epoll_ctl(h->epfd, EPOLL_CTL_MOD, s, &ev) != 0))
			return -1;
	}
	if (f)
		*f = (*f & JF_FD_OURS) | JF_FD_REG | want;
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
		h->timer_deadline_us = jf_http_now_mono_us() + (int64_t) timeout_ms * 1000;
	}
	return 0;
}

/* ---------------------------------------------------------------------
 * Starting queued requests and submission
 * ---------------------------------------------------------------------
 */

/* Start the oldest waiting requests whose hosts have room, up to the cap. */
static void
start_queued(JfHttp *h)
{
	JfReq	   *r;

	while (h->nactive < h->max_concurrent && (r = jf_http_queue_pop(h)) != NULL)
		jf_http_req_start(h, r);
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
	bool		queued;

	if (r == NULL)
		return false;
	r->res.task_id = req->task_id;
	r->res.attempt = req->attempt;
	r->res.user = req->user;
	r->res.retry_after_ms = -1;
	r->res.queued_at_ms = jf_http_now_wall_ms();
	r->res.started_at_ms = r->res.queued_at_ms;

	problem = jf_http_req_prepare(h, r, req, &key, &oom);
	if (oom)
	{
		free(key);
		jf_http_req_free(r, true);
		return false;
	}
	if (problem)
	{
		free(key);
		jf_http_req_set_error(r, JF_HTTP_INVALID, problem);
		r->res.finished_at_ms = r->res.queued_at_ms;
		curl_slist_free_all(r->headers);
		r->headers = NULL;
		free(r->body);
		r->body = NULL;
		jf_http_req_done(h, r);
		return true;
	}
	queued = jf_http_queue_push(h, r, key);
	free(key);
	if (!queued)
	{
		jf_http_req_free(r, true);
		return false;
	}
	start_queued(h);
	return true;
}

/* ---------------------------------------------------------------------
 * Driving
 * ---------------------------------------------------------------------
 */

/*
 * curl reports finished transfers as messages; each becomes a result and
 * frees a slot for a queued request.
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
			jf_http_req_complete(h, r, rc);
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
			h->timer_deadline_us = jf_http_now_mono_us() + (int64_t) ms * 1000;
	}
}

/*
 * Signals are blocked before curl runs any transfer, because that is where
 * its threaded resolver starts its threads, which inherit our mask: with
 * everything blocked, the backend's signal handlers only ever run on the
 * backend's own thread.  Any curl_multi_socket_action() call may start
 * one (a transfer whose timer is due, or a redirect to a new name, runs
 * inside the call for another socket's event), so the first of them in a
 * jf_http_perform() blocks, and the mask is restored when it returns.
 * Adding a handle (start_queued) only arms curl's timer and needs no
 * blocking, so a call with nothing ready makes no mask change at all.
 */
static void
block_signals(bool *blocked, sigset_t *old)
{
	sigset_t	all;

	if (*blocked)
		return;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, old);
	*blocked = true;
}

/*
 * All of curl's work happens here, with signals blocked (block_signals).
 * Pending signals are delivered on return; nothing here blocks, so that is
 * soon.
 */
void
jf_http_perform(JfHttp *h)
{
	struct epoll_event evs[JF_EPOLL_BATCH];
	int			running;
	sigset_t	old;
	bool		blocked = false;

	/* socket activity, in bounded batches so one call stays short */
	for (int round = 0; round < 8; round++)
	{
		int			n = epoll_wait(h->epfd, evs, JF_EPOLL_BATCH, 0);

		for (int i = 0; i < n; i++)
		{
			uint32_t	ev = evs[i].events;
			int			fd = evs[i].data.fd;
			int			mask = 0;

			/* an idle connection's socket: closed by its server, say */
			if (fd < h->nfds && (h->fds[fd] & JF_FD_IDLE))
			{
				epoll_ctl(h->epfd, EPOLL_CTL_DEL, fd, NULL);
				h->fds[fd] &= JF_FD_OURS;
				continue;
			}
			if (ev & (EPOLLIN | EPOLLHUP | EPOLLRDHUP))
				mask |= CURL_CSELECT_IN;
			if (ev & EPOLLOUT)
				mask |= CURL_CSELECT_OUT;
			if (ev & EPOLLERR)
				mask |= CURL_CSELECT_ERR;
			block_signals(&blocked, &old);
			curl_multi_socket_action(h->multi, fd, mask, &running);
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
		if (!h->timer_set || h->timer_deadline_us > jf_http_now_mono_us())
			break;
		block_signals(&blocked, &old);
		fire_timer(h);
		drain_messages(h);
		start_queued(h);
	}
	if (blocked)
		pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Stable for h's lifetime, so the worker can add it to its wait set once. */
int
jf_http_fd(const JfHttp *h)
{
	return h->epfd;
}

/*
 * Rounded up, so a caller that sleeps this long never wakes before curl's
 * deadline and spins.
 */
long
jf_http_timeout_ms(const JfHttp *h)
{
	int64_t		rem;

	if (h->done_head)
		return 0;
	if (!h->timer_set)
		return -1;
	rem = h->timer_deadline_us - jf_http_now_mono_us();
	if (rem <= 0)
		return 0;
	return (long) ((rem + 999) / 1000);
}

/* The result is copied out whole: its body now belongs to the caller. */
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
	jf_http_req_free(r, false);
	return true;
}

/* Safe to call twice: the body pointer is cleared. */
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

/* Counters for the worker's status view. */
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

uint64_t
jf_http_stale_restarts(const JfHttp *h)
{
	return h->stale_restarts;
}

/* ---------------------------------------------------------------------
 * Life cycle and configuration
 * ---------------------------------------------------------------------
 */

/* Validate and copy cfg into h; on OOM or a bad list leave h untouched. */
static bool
apply_config(JfHttp *h, const JfHttpConfig *cfg, char *errbuf, size_t errlen)
{
	char	   *ua = NULL,
			   *proxy = NULL,
			   *doh_url = NULL,
			   *ca_file = NULL,
			   *ca_path = NULL;
	JfNet	   *deny = NULL,
			   *allow = NULL;
	int			ndeny,
				nallow;
	struct curl_slist *resolve = NULL;

	if (!jf_http_parse_networks(cfg->deny_networks, &deny, &ndeny, errbuf, errlen))
		return false;
	if (!jf_http_parse_networks(cfg->allow_networks, &allow, &nallow, errbuf, errlen))
	{
		free(deny);
		return false;
	}
	if (!jf_http_dup_opt(cfg->user_agent, &ua) ||
		!jf_http_dup_opt(cfg->proxy, &proxy) ||
		!jf_http_dup_opt(cfg->doh_url && cfg->doh_url[0] ? cfg->doh_url : NULL, &doh_url) ||
		!jf_http_dup_opt(cfg->ca_file && cfg->ca_file[0] ? cfg->ca_file : NULL, &ca_file) ||
		!jf_http_dup_opt(cfg->ca_path && cfg->ca_path[0] ? cfg->ca_path : NULL, &ca_path))
		goto oom;
	for (int i = 0; cfg->resolve && cfg->resolve[i]; i++)
	{
		struct curl_slist *n = curl_slist_append(resolve, cfg->resolve[i]);

		if (n == NULL)
			goto oom;
		resolve = n;
	}
	free(h->user_agent);
	free(h->proxy);
	free(h->doh_url);
	free(h->ca_file);
	free(h->ca_path);
	free(h->deny);
	free(h->allow);
	curl_slist_free_all(h->resolve);
	h->resolve = resolve;
	h->doh_url = doh_url;
	h->ca_file = ca_file;
	h->ca_path = ca_path;
	h->no_capath = ca_path == NULL &&
		(ca_file != NULL || curl_version_info(CURLVERSION_NOW)->cainfo != NULL);
	h->follow_cross_origin = cfg->follow_cross_origin;
	h->user_agent = ua;
	h->proxy = proxy;
	h->deny = deny;
	h->ndeny = ndeny;
	h->allow = allow;
	h->nallow = nallow;
	h->max_concurrent = cfg->max_concurrent > 0 ? cfg->max_concurrent : 1;
	h->max_per_host = cfg->max_per_host > 0 ? cfg->max_per_host : 1;
	h->max_response_bytes = cfg->max_response_bytes;
	h->max_redirects = cfg->max_redirects > 0 ? cfg->max_redirects : 0;
	/* pooled handles still carry the old settings: set up again when taken */
	if (++h->config_gen == 0)
		h->config_gen = 1;		/* 0 stands for a new handle */
	/* bound idle cached connections (and so open fds) too */
	curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, (long) h->max_concurrent);
	return true;

oom:
	curl_slist_free_all(resolve);
	free(deny);
	free(allow);
	free(ua);
	free(proxy);
	free(doh_url);
	free(ca_file);
	free(ca_path);
	set_err(errbuf, errlen, "out of memory");
	return false;
}

/*
 * Everything the dispatcher needs for its lifetime is set up here, so that
 * failure shows at the worker's start rather than at the first request.
 */
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
	if (jf_http_queue_init(h))
		h->multi = curl_multi_init();
	if (h->multi == NULL)
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
	h->h2_uploads = curl_version_info(CURLVERSION_NOW)->version_num >= 0x080300;
	h->http_version = (curl_version_info(CURLVERSION_NOW)->features & CURL_VERSION_HTTP2) ?
		CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_1_1;
	/* one thread: the share needs no lock callbacks */
	h->share = curl_share_init();
	if (h->share == NULL ||
		curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)
	{
		set_err(errbuf, errlen, "could not set up the TLS session cache");
		goto fail;
	}
	if (!apply_config(h, cfg, errbuf, errlen))
		goto fail;
	return h;

fail:
	if (h->multi)
		curl_multi_cleanup(h->multi);
	if (h->share)
		curl_share_cleanup(h->share);
	if (h->epfd >= 0)
		close(h->epfd);
	(void) jf_http_queue_destroy(h);	/* nothing was queued yet */
	free(h);
	return NULL;
}

/*
 * A changed per-host cap changes which hosts can start something, so every
 * host is re-checked before queued requests are started.
 */
bool
jf_http_set_config(JfHttp *h, const JfHttpConfig *cfg)
{
	if (!apply_config(h, cfg, NULL, 0))
		return false;
	jf_http_queue_recheck(h);
	start_queued(h);
	return true;
}

/*
 * Requests in flight are aborted without results: the worker only destroys
 * the dispatcher on exit, and its start-up recovery handles what was
 * running.
 */
void
jf_http_destroy(JfHttp *h)
{
	JfReq	   *waiting;

	if (h == NULL)
		return;
	while (h->active)
	{
		JfReq	   *r = h->active;

		h->active = r->next;
		curl_multi_remove_handle(h->multi, r->easy);
		curl_easy_cleanup(r->easy);
		jf_http_req_free(r, true);
	}
	waiting = jf_http_queue_destroy(h);
	while (waiting)
	{
		JfReq	   *r = waiting;

		waiting = r->next;
		jf_http_req_free(r, true);
	}
	while (h->done_head)
	{
		JfReq	   *r = h->done_head;

		h->done_head = r->next;
		jf_http_req_free(r, true);
	}
	for (int i = 0; i < h->npool; i++)
		curl_easy_cleanup(h->pool[i]);
	/* closes cached connections, which still talks to our epoll fd */
	curl_multi_cleanup(h->multi);
	/* after every handle that used it is gone */
	curl_share_cleanup(h->share);
	jf_http_sockets_destroy(h);
	close(h->epfd);
	jf_http_url_memo_clear(h);
	free(h->fds);
	free(h->user_agent);
	free(h->proxy);
	free(h->doh_url);
	free(h->ca_file);
	free(h->ca_path);
	free(h->deny);
	free(h->allow);
	curl_slist_free_all(h->resolve);
	free(h);
}
