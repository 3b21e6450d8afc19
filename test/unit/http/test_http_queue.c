/*-------------------------------------------------------------------------
 *
 * test_http_queue.c
 *	  Unit tests for the HTTP dispatcher (src/http*.c): admission.
 *
 * How requests wait and start, against test/receiver.py on loopback
 * (http_harness.c): the per-host and global caps, submission order among
 * startable requests, a hung host not holding back others, caps changed
 * on the fly, many requests at once.  Single requests are
 * test_http_requests.c.
 *
 *-------------------------------------------------------------------------
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "http/http.h"
#include "http_harness.h"
#include "unit.h"

/*
 * Per-host cap 2: eight 300 ms requests run two at a time (client and
 * server agree), and queueing does not eat their 800 ms timeout (the last
 * two wait 900 ms; each request keeps 500 ms to spare for a slow machine).
 */
static void
test_per_host_cap(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	int64_t		t0;
	char	   *json;
	int64_t		max_wait = 0;

	reset_receiver();
	cfg.max_per_host = 2;
	h = make(&cfg);
	t0 = mono_ms();
	for (int i = 1; i <= 8; i++)
		submit(h, i, url("127.0.0.1", "/delay/300"), "GET", NULL, 0, NULL, 800);
	CHECK(jf_http_in_flight(h) == 2 && jf_http_queued(h) == 6);
	run_until(h, c, 8, 8000);
	CHECK(c->n == 8);
	for (int i = 0; i < c->n; i++)
	{
		CHECK(c->r[i].error_kind == JF_HTTP_OK && c->r[i].http_status == 200);
		if (c->r[i].started_at_ms - c->r[i].queued_at_ms > max_wait)
			max_wait = c->r[i].started_at_ms - c->r[i].queued_at_ms;
	}
	CHECK(max_wait >= 800);		/* the last two waited longer than their timeout */
	CHECK(c->max_in_flight == 2);
	CHECK(mono_ms() - t0 >= 1150);
	json = fetch("GET", "/_requests");
	CHECK(max_server_inflight(json, "/delay/300") == 2);
	free(json);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/* Global cap across hosts; and results of one host come back in FIFO order. */
static void
test_global_cap_and_order(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));

	cfg.max_concurrent = 3;
	h = make(&cfg);
	for (int i = 1; i <= 9; i++)
		submit(h, i, url(i % 2 ? "127.0.0.1" : "localhost", "/delay/150"), "GET",
			   NULL, 0, NULL, 5000);
	CHECK(jf_http_in_flight(h) == 3 && jf_http_queued(h) == 6);
	run_until(h, c, 9, 5000);
	CHECK(c->n == 9);
	CHECK(c->max_in_flight == 3);
	for (int i = 0; i < c->n; i++)
		CHECK(c->r[i].http_status == 200);
	collected_free(c);
	jf_http_destroy(h);

	cfg = default_config();
	cfg.max_per_host = 1;
	h = make(&cfg);
	for (int i = 1; i <= 5; i++)
		submit(h, i, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL, 5000);
	run_until(h, c, 5, 5000);
	CHECK(c->n == 5);
	for (int i = 0; i < c->n; i++)
		CHECK(c->r[i].task_id == i + 1 && c->r[i].http_status == 200);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/*
 * A host saturated by hung requests (cap 2, two more queued) does not delay
 * another host; destroying the dispatcher aborts the hung ones.
 */
/* counts queued requests and sums their user values */
static void
note_queued(void *user, void *arg)
{
	intptr_t   *seen = arg;

	seen[0]++;
	seen[1] += (intptr_t) user;
}

static void
test_hung_host_isolation(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	int64_t		t0;

	cfg.max_per_host = 2;
	h = make(&cfg);
	for (int i = 1; i <= 4; i++)
		submit(h, i, url("127.0.0.1", "/hang"), "GET", NULL, 0, NULL, 20000);
	/* let the hung ones connect and be sent before the others arrive */
	run_until(h, c, 1, 200);
	CHECK(c->n == 0);
	t0 = mono_ms();
	for (int i = 11; i <= 15; i++)
		submit(h, i, url("localhost", "/ok"), "GET", NULL, 0, NULL, 5000);
	run_until(h, c, 5, 3000);
	CHECK(c->n == 5);
	CHECK(mono_ms() - t0 < 1000);
	for (int i = 0; i < c->n; i++)
		CHECK(c->r[i].task_id >= 11 && c->r[i].http_status == 200);
	CHECK(jf_http_in_flight(h) == 2 && jf_http_queued(h) == 2);
	/* the two waiting behind the hung host were never sent: tasks 3 and 4 */
	{
		intptr_t	seen[2] = {0, 0};

		jf_http_foreach_queued(h, note_queued, seen);
		CHECK(seen[0] == 2);
		CHECK(seen[1] == 30 + 40);	/* users are id * 10 */
	}
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/* Raising the per-host cap at run time starts queued requests at once. */
static void
test_set_config(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));

	cfg.max_per_host = 1;
	h = make(&cfg);
	for (int i = 1; i <= 4; i++)
		submit(h, i, url("127.0.0.1", "/delay/200"), "GET", NULL, 0, NULL, 5000);
	CHECK(jf_http_in_flight(h) == 1 && jf_http_queued(h) == 3);
	cfg.max_per_host = 4;
	CHECK(jf_http_set_config(h, &cfg));
	CHECK(jf_http_in_flight(h) == 4 && jf_http_queued(h) == 0);
	run_until(h, c, 4, 5000);
	CHECK(c->n == 4);
	for (int i = 0; i < c->n; i++)
		CHECK(c->r[i].http_status == 200);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/* 200 requests in flight at once all complete, truly concurrently. */
static void
test_many_concurrent(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	int64_t		t0;
	int			ok = 0;
	char	   *json;

	reset_receiver();
	cfg.max_per_host = 256;
	h = make(&cfg);
	t0 = mono_ms();
	for (int i = 1; i <= 200; i++)
		CHECK(submit(h, i, url("127.0.0.1", "/delay/500"), "POST", NULL, 0, "x", 15000));
	CHECK(jf_http_in_flight(h) == 200);
	run_until(h, c, 200, 20000);
	CHECK(c->n == 200);
	for (int i = 0; i < c->n; i++)
		ok += c->r[i].http_status == 200;
	CHECK(ok == 200);
	CHECK(mono_ms() - t0 < 8000);
	json = fetch("GET", "/_requests");
	CHECK(max_server_inflight(json, "/delay/500") >= 50);
	free(json);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

int
main(void)
{
	if (!harness_start())
	{
		unit_failed++;
		return unit_done("test_http_queue");
	}

	test_per_host_cap();
	test_global_cap_and_order();
	test_hung_host_isolation();
	test_set_config();
	test_many_concurrent();

	harness_stop();
	return unit_done("test_http_queue");
}
