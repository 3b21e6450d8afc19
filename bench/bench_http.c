/*-------------------------------------------------------------------------
 *
 * bench_http.c
 *	  Throughput and latency of the HTTP dispatcher (src/http).
 *
 * usage: bench_http [N [CONCURRENCY [URL [CA_FILE]]]]
 *
 * Closed loop: CONCURRENCY requests are kept outstanding until N have
 * completed; latency is submit-to-result (monotonic clock), so it includes
 * the dispatcher and the caller's loop, as the worker would see it.  With
 * no URL, test/receiver.py is started on a free loopback port by the unit
 * tests' harness (test/unit/http_harness.c) and /ok is used
 * ($JOBFLOW_RECEIVER overrides its path).  CA_FILE: the PEM bundle trusted
 * for an https URL, as jobflow.tls_ca_file (default: libcurl's).  Prints
 * figures only.
 *
 *-------------------------------------------------------------------------
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/http.h"
#include "http_harness.h"

static int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t		x = *(const int64_t *) a,
				y = *(const int64_t *) b;

	return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
	int			n = argc > 1 ? atoi(argv[1]) : 20000;
	int			conc = argc > 2 ? atoi(argv[2]) : 100;
	char		url[512];
	char		err[256];
	JfHttpConfig cfg;
	JfHttp	   *h;
	int64_t    *sent_at,
			   *lat;
	int			submitted = 0,
				done = 0,
				ok = 0,
				failed = 0;
	int64_t		t0,
				elapsed;

	if (n <= 0 || conc <= 0)
	{
		fprintf(stderr, "usage: bench_http [N [CONCURRENCY [URL [CA_FILE]]]]\n");
		return 2;
	}
	if (argc > 3)
	{
		snprintf(url, sizeof(url), "%s", argv[3]);
		if (!jf_http_global_init(err, sizeof(err)))
		{
			fprintf(stderr, "%s\n", err);
			return 1;
		}
	}
	else
	{
		/* the unit tests' harness: receiver on a free port, libcurl set up */
		if (!harness_start())
			return 1;
		atexit(harness_stop);
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/ok", port);
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.max_concurrent = conc;
	cfg.max_per_host = conc;
	cfg.max_response_bytes = 1024;
	cfg.user_agent = "jobflow-bench/0.1";
	cfg.ca_file = argc > 4 ? argv[4] : NULL;
	h = jf_http_create(&cfg, err, sizeof(err));
	sent_at = calloc(n, sizeof(int64_t));
	lat = calloc(n, sizeof(int64_t));
	if (h == NULL || sent_at == NULL || lat == NULL)
	{
		fprintf(stderr, "setup failed: %s\n", h ? "out of memory" : err);
		return 1;
	}

	t0 = now_us();
	while (done < n)
	{
		JfHttpResult r;
		struct pollfd pfd = {.fd = jf_http_fd(h),.events = POLLIN};
		long		t;

		while (submitted < n && submitted - done < conc)
		{
			JfHttpRequest rq;

			memset(&rq, 0, sizeof(rq));
			rq.task_id = submitted;
			rq.attempt = 1;
			rq.url = url;
			rq.method = "POST";
			rq.body = "{\"bench\": true}";
			rq.body_len = strlen(rq.body);
			rq.timeout_ms = 10000;
			sent_at[submitted] = now_us();
			if (!jf_http_submit(h, &rq))
			{
				fprintf(stderr, "submit failed\n");
				return 1;
			}
			submitted++;
		}
		t = jf_http_timeout_ms(h);
		poll(&pfd, 1, t < 0 || t > 1000 ? 1000 : (int) t);
		jf_http_perform(h);
		while (jf_http_next_result(h, &r))
		{
			lat[done++] = now_us() - sent_at[r.task_id];
			if (r.error_kind == JF_HTTP_OK && r.http_status >= 200 && r.http_status < 300)
				ok++;
			else if (failed++ < 5)
				fprintf(stderr, "failure: status %d kind %d %s\n",
						r.http_status, r.error_kind, r.error);
			jf_http_result_free(&r);
		}
	}
	elapsed = now_us() - t0;
	qsort(lat, n, sizeof(int64_t), cmp_i64);
	printf("bench_http: %d requests, concurrency %d, %d ok, %d failed\n",
		   n, conc, ok, failed);
	printf("  %.0f requests/s, latency p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
		   n / (elapsed / 1e6), lat[n / 2] / 1000.0,
		   lat[(int) (n * 0.99)] / 1000.0, lat[n - 1] / 1000.0);
	jf_http_destroy(h);
	jf_http_global_cleanup();
	free(sent_at);
	free(lat);
	return 0;
}
