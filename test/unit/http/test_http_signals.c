/*-------------------------------------------------------------------------
 *
 * test_http_signals.c
 *	  The threads curl's threaded resolver starts never take the backend's
 *	  signals: they are born with every signal blocked.
 *
 * jf_http_perform() blocks signals only around the calls that can run
 * transfers (http.c, block_signals); a thread inherits the mask of the
 * thread that creates it, so a lookup started with signals open would run
 * the backend's handlers on a thread that is not the backend's.  This
 * program provides getaddrinfo() itself (libcurl's calls bind to the
 * program's definition first), so that the lookup of a made-up name
 * records the mask and thread it runs under and answers 127.0.0.1: no DNS
 * server is ever asked.  Looked up: a request's own host, and a name that
 * a redirect leads to, which curl resolves inside the call for the first
 * response's socket event.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include "http_harness.h"
#include "unit.h"

#define FAKE_HOST	"jobflow-signals.invalid"

static pthread_t main_thread;
static int	lookups;			/* of FAKE_HOST */
static int	lookups_off_main;	/* on another thread than main's */
static int	lookups_unblocked;	/* with a blockable signal open */

typedef int (*getaddrinfo_fn) (const char *, const char *,
							   const struct addrinfo *, struct addrinfo **);

/*
 * The resolver thread's lookups land here.  Counters are only read after
 * the request's result, which curl takes from the thread after it ends.
 */
int
getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
			struct addrinfo **res)
{
	static getaddrinfo_fn real;

	if (real == NULL)
		real = (getaddrinfo_fn) dlsym(RTLD_NEXT, "getaddrinfo");
	if (node != NULL && strcmp(node, FAKE_HOST) == 0)
	{
		sigset_t	cur;

		pthread_sigmask(SIG_BLOCK, NULL, &cur);
		__atomic_add_fetch(&lookups, 1, __ATOMIC_SEQ_CST);
		if (!pthread_equal(pthread_self(), main_thread))
			__atomic_add_fetch(&lookups_off_main, 1, __ATOMIC_SEQ_CST);
		for (int s = 1; s < NSIG; s++)
		{
			if (s == SIGKILL || s == SIGSTOP || (s >= 32 && s < SIGRTMIN))
				continue;		/* never blockable, or glibc's own */
			if (!sigismember(&cur, s))
			{
				__atomic_add_fetch(&lookups_unblocked, 1, __ATOMIC_SEQ_CST);
				break;
			}
		}
		node = "127.0.0.1";
	}
	return real(node, service, hints, res);
}

/* One request to u; its result must be a 200. */
static void
one_request(JfHttp *h, int64_t id, const char *u)
{
	Collected  *c = calloc(1, sizeof(Collected));

	CHECK(submit(h, id, u, "GET", NULL, 0, NULL, 5000));
	run_until(h, c, 1, 5000);
	CHECKF(c->n == 1 && c->r[0].error_kind == JF_HTTP_OK && c->r[0].http_status == 200,
		   "request %lld: %s (status %d)", (long long) id,
		   c->n == 1 ? c->r[0].error : "no result", c->n == 1 ? c->r[0].http_status : 0);
	collected_free(c);
	free(c);
}

static void
test_resolver_threads_blocked(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	char		u[256];
	char		path[256];
	sigset_t	cur;

	cfg.max_redirects = 2;
	cfg.follow_cross_origin = true;
	h = make(&cfg);

	/* the request's own host */
	snprintf(u, sizeof(u), "http://%s:%d/ok", FAKE_HOST, port);
	one_request(h, 1, u);
	CHECK(lookups >= 1);

	/* a name met on a redirect (a new dispatcher: no cached lookup) */
	jf_http_destroy(h);
	h = make(&cfg);
	lookups = 0;
	snprintf(path, sizeof(path), "/redirect?to=http%%3A%%2F%%2F%s%%3A%d%%2Fok", FAKE_HOST, port);
	one_request(h, 2, url("127.0.0.1", path));
	CHECK(lookups >= 1);

	/* a threaded resolver: every lookup ran elsewhere, signals blocked */
	if (curl_version_info(CURLVERSION_NOW)->features & CURL_VERSION_ASYNCHDNS)
		CHECKF(lookups_off_main > 0, "no lookup ran on a resolver thread");
	CHECKF(lookups_unblocked == 0, "%d lookups ran with signals open", lookups_unblocked);

	/* and the caller's own mask is as it was */
	pthread_sigmask(SIG_BLOCK, NULL, &cur);
	CHECK(!sigismember(&cur, SIGTERM) && !sigismember(&cur, SIGHUP) &&
		  !sigismember(&cur, SIGUSR1));
	jf_http_destroy(h);
}

int
main(void)
{
	main_thread = pthread_self();
	if (!harness_start())
		return 1;
	test_resolver_threads_blocked();
	harness_stop();
	return unit_done("test_http_signals");
}
