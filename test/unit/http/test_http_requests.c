/*-------------------------------------------------------------------------
 *
 * test_http_requests.c
 *	  Unit tests for the HTTP dispatcher (src/http*.c): one request.
 *
 * What a single request does, against test/receiver.py on loopback
 * (http_harness.c): headers sent, statuses and Retry-After, timeouts and
 * refused connections, methods and bodies, truncated responses and
 * endless ones, invalid requests, redirects, denied, allowed and
 * unspecified addresses (the lists' syntax and the default deny list
 * included), curl's silent re-sends, cross-origin redirects.  Admission and ordering are
 * test_http_queue.c.
 *
 *-------------------------------------------------------------------------
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "http/http.h"
#include "http_harness.h"
#include "unit.h"

/* 200 with its body, and the X-Jobflow-* headers and User-Agent arrive. */
static void
test_ok_and_headers(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h = make(&cfg);
	Collected  *c = calloc(1, sizeof(Collected));
	JfHttpRequest rq;
	JfHttpResult *r;
	char	   *json,
			   *rec;

	reset_receiver();
	memset(&rq, 0, sizeof(rq));
	rq.task_id = 4242;
	rq.attempt = 3;
	rq.user = &rq;
	rq.url = url("127.0.0.1", "/ok");
	rq.method = "get";
	rq.timeout_ms = 5000;
	CHECK(jf_http_submit(h, &rq));
	CHECK(jf_http_in_flight(h) + jf_http_queued(h) == 1);
	run_until(h, c, 1, 5000);
	CHECK(c->n == 1);
	r = &c->r[0];
	CHECK(r->task_id == 4242 && r->attempt == 3 && r->user == &rq);
	CHECK(r->error_kind == JF_HTTP_OK && r->error[0] == '\0' && r->curl_code == 0);
	CHECK(r->http_status == 200);
	CHECK(r->body_len == 2 && r->body && strcmp(r->body, "ok") == 0);
	CHECK(!r->body_truncated);
	CHECK(r->retry_after_ms == -1);
	CHECK(r->queued_at_ms > 1600000000000LL);
	CHECK(r->queued_at_ms <= r->started_at_ms && r->started_at_ms <= r->finished_at_ms);
	CHECK(jf_http_in_flight(h) == 0 && jf_http_queued(h) == 0);
	CHECK(!jf_http_next_result(h, &c->r[1]));
	{
		sigset_t	cur;

		/* perform blocks signals only while it runs */
		sigprocmask(SIG_BLOCK, NULL, &cur);
		CHECK(!sigismember(&cur, SIGTERM) && !sigismember(&cur, SIGHUP));
	}
	collected_free(c);
	free(c);
	jf_http_destroy(h);

	json = fetch("GET", "/_requests");
	rec = record_of(json, 4242);
	CHECK(rec != NULL);
	if (rec)
	{
		CHECK(strstr(rec, "\"x-jobflow-attempt\": \"3\"") != NULL);
		CHECK(strstr(rec, "\"user-agent\": \"jobflow-test/1.0\"") != NULL);
		CHECK(strstr(rec, "\"method\": \"GET\"") != NULL);
		CHECK(strstr(rec, "\"expect\"") == NULL);
	}
	free(rec);
	free(json);
}

/* Statuses are not transport errors; Retry-After in both of its forms. */
static void
test_status_and_retry_after(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h = make(&cfg);
	Collected  *c = calloc(1, sizeof(Collected));
	char		path[256],
				date[64];
	time_t		later = time(NULL) + 5;
	JfHttpResult *r;

	strftime(date, sizeof(date), "%a,%%20%d%%20%b%%20%Y%%20%H:%M:%S%%20GMT", gmtime(&later));
	snprintf(path, sizeof(path), "/status/503?retry_after=%s", date);
	submit(h, 1, url("127.0.0.1", "/status/503"), "GET", NULL, 0, NULL, 5000);
	submit(h, 2, url("127.0.0.1", "/status/429?retry_after=2"), "GET", NULL, 0, NULL, 5000);
	submit(h, 3, url("127.0.0.1", path), "GET", NULL, 0, NULL, 5000);
	submit(h, 4, url("127.0.0.1", "/status/503?retry_after=soon"), "GET", NULL, 0, NULL, 5000);
	submit(h, 5, url("127.0.0.1", "/status/404"), "GET", NULL, 0, NULL, 5000);
	run_until(h, c, 5, 5000);
	CHECK(c->n == 5);
	r = by_id(c, 1);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 503 && r->retry_after_ms == -1);
	CHECK(r && r->body && strcmp(r->body, "status 503") == 0);
	r = by_id(c, 2);
	CHECK(r && r->http_status == 429 && r->retry_after_ms == 2000);
	r = by_id(c, 3);
	CHECK(r && r->http_status == 503 && r->retry_after_ms >= 3000 && r->retry_after_ms <= 6000);
	r = by_id(c, 4);
	CHECK(r && r->http_status == 503 && r->retry_after_ms == -1);
	r = by_id(c, 5);
	CHECK(r && r->http_status == 404 && r->error_kind == JF_HTTP_OK);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/* A hung server times out after ~timeout_ms; a closed port is "connect". */
static void
test_timeout_and_connect(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h = make(&cfg);
	Collected  *c = calloc(1, sizeof(Collected));
	char		u1[128],
				u2[128];
	int			cp = closed_port();
	JfHttpResult *r;
	int64_t		t0 = mono_ms();

	snprintf(u1, sizeof(u1), "http://127.0.0.1:%d/nothing", cp);
	snprintf(u2, sizeof(u2), "http://someone:s3cr3tpw@127.0.0.1:%d/x", cp);
	submit(h, 1, url("127.0.0.1", "/hang"), "GET", NULL, 0, NULL, 500);
	submit(h, 2, u1, "GET", NULL, 0, NULL, 5000);
	submit(h, 3, u2, "POST", NULL, 0, "x", 5000);
	run_until(h, c, 3, 5000);
	CHECK(c->n == 3);
	r = by_id(c, 1);
	CHECK(r && r->error_kind == JF_HTTP_TIMEOUT && r->http_status == 0);
	CHECK(r && r->error[0] != '\0' && r->body == NULL);
	CHECK(r && r->finished_at_ms - r->started_at_ms >= 450 &&
		  r->finished_at_ms - r->started_at_ms < 1500);
	CHECK(mono_ms() - t0 < 2000);
	r = by_id(c, 2);
	CHECK(r && r->error_kind == JF_HTTP_CONNECT && r->http_status == 0 && r->error[0] != '\0');
	r = by_id(c, 3);
	CHECK(r && r->error_kind == JF_HTTP_CONNECT);
	CHECK(r && strstr(r->error, "s3cr3tpw") == NULL && strstr(r->error, "someone") == NULL);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/* Methods, headers and bodies reach the server; HEAD has no body. */
static void
test_methods_and_echo(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h = make(&cfg);
	Collected  *c = calloc(1, sizeof(Collected));
	const char *hdrs[] = {"Content-Type: application/json", "X-Test: yes",
		"Expect: 100-continue", "X-Jobflow-Task-Id: 999"};
	const char *json_body = "{\"k\": \"v\"}";
	char	   *json,
			   *rec;
	JfHttpResult *r;

	reset_receiver();
	submit(h, 11, url("127.0.0.1", "/echo"), "PUT", hdrs, 4, json_body, 5000);
	submit(h, 12, url("127.0.0.1", "/echo"), "POST", hdrs, 2, "hello=1", 5000);
	submit(h, 13, url("127.0.0.1", "/echo"), "PATCH", NULL, 0, "p", 5000);
	submit(h, 14, url("127.0.0.1", "/ok"), "DELETE", NULL, 0, NULL, 5000);
	submit(h, 15, url("127.0.0.1", "/ok"), "HEAD", NULL, 0, NULL, 5000);
	submit(h, 16, url("127.0.0.1", "/ok"), "OPTIONS", NULL, 0, NULL, 5000);
	submit(h, 17, url("127.0.0.1", "/echo"), "POST", NULL, 0, NULL, 5000);
	run_until(h, c, 7, 5000);
	CHECK(c->n == 7);
	for (int i = 0; i < c->n; i++)
		CHECK(c->r[i].error_kind == JF_HTTP_OK && c->r[i].http_status == 200);
	r = by_id(c, 11);
	CHECK(r && r->body && strcmp(r->body, json_body) == 0);
	r = by_id(c, 12);
	CHECK(r && r->body && strcmp(r->body, "hello=1") == 0);
	r = by_id(c, 13);
	CHECK(r && r->body && strcmp(r->body, "p") == 0);
	r = by_id(c, 15);
	CHECK(r && r->body == NULL && r->body_len == 0);
	r = by_id(c, 17);
	CHECK(r && r->body_len == 0);
	collected_free(c);
	free(c);
	jf_http_destroy(h);

	json = fetch("GET", "/_requests");
	rec = record_of(json, 11);
	CHECK(rec && strstr(rec, "\"method\": \"PUT\""));
	CHECK(rec && strstr(rec, "\"x-test\": \"yes\""));
	CHECK(rec && strstr(rec, "\"content-type\": \"application/json\""));
	CHECK(rec && strstr(rec, "\"body\": \"{\\\"k\\\": \\\"v\\\"}\""));
	CHECK(rec && strstr(rec, "\"expect\"") == NULL);
	CHECK(rec && strstr(rec, "999") == NULL);
	free(rec);
	rec = record_of(json, 999);
	CHECK(rec == NULL);
	free(rec);
	for (int id = 12; id <= 16; id++)
	{
		static const char *const m[] = {"POST", "PATCH", "DELETE", "HEAD", "OPTIONS"};
		char		want[64];

		rec = record_of(json, id);
		snprintf(want, sizeof(want), "\"method\": \"%s\"", m[id - 12]);
		CHECK(rec && strstr(rec, want));
		free(rec);
	}
	free(json);
}

/*
 * One easy handle serves every request in turn (max_concurrent 1), and
 * keeps what the last request set unless the next one sets it again: each
 * request must go out with its own method, body and headers only, and a
 * new configuration reaches the handles already pooled.
 */
static void
test_recycled_handles(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	const char *hdrs[] = {"X-Test: yes", "Content-Type: text/plain"};
	static const struct
	{
		const char *method;
		bool		with_headers;
		const char *body;
	}			seq[] = {
		{"PUT", true, "put-body"},
		{"GET", false, NULL},
		{"HEAD", false, NULL},
		{"POST", true, NULL},
		{"GET", false, "get-body"},
		{"DELETE", false, NULL},
		{"POST", false, "post-body"},
		{"OPTIONS", false, NULL},
		{"GET", false, NULL},
	};
	int			n = (int) (sizeof(seq) / sizeof(seq[0]));
	char	   *json;

	cfg.max_concurrent = 1;
	cfg.max_per_host = 1;
	h = make(&cfg);
	reset_receiver();
	for (int i = 0; i <= n; i++)
	{
		Collected  *c = calloc(1, sizeof(Collected));

		if (i == n)
		{
			/* the last one after a reload: the pooled handle learns it */
			cfg.user_agent = "jobflow-test/2.0";
			CHECK(jf_http_set_config(h, &cfg));
			submit(h, 100 + i, url("127.0.0.1", "/echo"), "GET", NULL, 0, NULL, 5000);
		}
		else
			submit(h, 100 + i, url("127.0.0.1", "/echo"), seq[i].method,
				   seq[i].with_headers ? hdrs : NULL, seq[i].with_headers ? 2 : 0,
				   seq[i].body, 5000);
		run_until(h, c, 1, 5000);
		CHECKF(c->n == 1 && c->r[0].error_kind == JF_HTTP_OK && c->r[0].http_status == 200,
			   "request %d: %s", i, c->n == 1 ? c->r[0].error : "no result");
		collected_free(c);
		free(c);
	}
	jf_http_destroy(h);

	json = fetch("GET", "/_requests");
	for (int i = 0; i <= n; i++)
	{
		char	   *rec = record_of(json, 100 + i);
		char		want[128];
		const char *method = i < n ? seq[i].method : "GET";
		const char *body = i < n && seq[i].body && strcmp(method, "HEAD") != 0 ? seq[i].body : "";
		bool		with_headers = i < n && seq[i].with_headers;

		CHECKF(rec != NULL, "request %d not received", i);
		if (rec == NULL)
			continue;
		snprintf(want, sizeof(want), "\"method\": \"%s\"", method);
		CHECKF(strstr(rec, want) != NULL, "request %d: %s", i, rec);
		snprintf(want, sizeof(want), "\"body\": \"%s\"", body);
		CHECKF(strstr(rec, want) != NULL, "request %d: %s", i, rec);
		CHECKF((strstr(rec, "\"x-test\": \"yes\"") != NULL) == with_headers,
			   "request %d: %s", i, rec);
		CHECKF(strstr(rec, i < n ? "jobflow-test/1.0" : "jobflow-test/2.0") != NULL,
			   "request %d: %s", i, rec);
		free(rec);
	}
	free(json);
}

/* Only the excerpt is kept, the rest is not read; still a 200. */
static void
test_big_truncated(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	JfHttpResult *r;

	cfg.max_response_bytes = 1000;
	h = make(&cfg);
	submit(h, 1, url("127.0.0.1", "/big"), "GET", NULL, 0, NULL, 10000);
	submit(h, 2, url("127.0.0.1", "/big?size=1000"), "GET", NULL, 0, NULL, 10000);
	run_until(h, c, 2, 10000);
	CHECK(c->n == 2);
	r = by_id(c, 1);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 200);
	CHECK(r && r->body_len == 1000 && r->body_truncated);
	CHECK(r && r->body && r->body[0] == 'x' && r->body[999] == 'x' && r->body[1000] == '\0');
	r = by_id(c, 2);
	CHECK(r && r->body_len == 1000 && !r->body_truncated);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/* Bad input never disappears: each gives an INVALID result. */
static void
test_invalid(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h = make(&cfg);
	Collected  *c = calloc(1, sizeof(Collected));
	const char *bad_hdr[] = {"X-Evil: a\r\nX-Injected: b"};
	const char *no_colon[] = {"NoColon"};

	submit(h, 1, "ftp://127.0.0.1/x", "GET", NULL, 0, NULL, 1000);
	submit(h, 2, "file:///etc/passwd", "GET", NULL, 0, NULL, 1000);
	submit(h, 3, "not a url", "GET", NULL, 0, NULL, 1000);
	submit(h, 4, url("127.0.0.1", "/ok"), "FOO", NULL, 0, NULL, 1000);
	submit(h, 5, url("127.0.0.1", "/ok"), "GET", bad_hdr, 1, NULL, 1000);
	submit(h, 6, url("127.0.0.1", "/ok"), "GET", no_colon, 1, NULL, 1000);
	submit(h, 7, "gopher://127.0.0.1/", "GET", NULL, 0, NULL, 1000);
	submit(h, 8, NULL, "GET", NULL, 0, NULL, 1000);
	CHECK(jf_http_timeout_ms(h) == 0);	/* results are waiting */
	run_until(h, c, 8, 2000);
	CHECK(c->n == 8);
	for (int i = 0; i < c->n; i++)
	{
		CHECK(c->r[i].error_kind == JF_HTTP_INVALID && c->r[i].error[0] != '\0');
		CHECK(c->r[i].http_status == 0 && c->r[i].body == NULL);
	}
	CHECK(jf_http_in_flight(h) == 0 && jf_http_queued(h) == 0);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/* Redirects: not followed with 0, followed within the bound, http(s) only. */
static void
test_redirects(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h0 = make(&cfg),
			   *h3;
	Collected  *c = calloc(1, sizeof(Collected));
	JfHttpResult *r;

	submit(h0, 1, url("127.0.0.1", "/redirect?to=/ok"), "GET", NULL, 0, NULL, 5000);
	run_until(h0, c, 1, 5000);
	CHECK(c->n == 1 && c->r[0].error_kind == JF_HTTP_OK && c->r[0].http_status == 302);
	collected_free(c);
	jf_http_destroy(h0);

	cfg.max_redirects = 3;
	h3 = make(&cfg);
	submit(h3, 1, url("127.0.0.1", "/redirect?to=/status/429%3Fretry_after%3D7"), "GET",
		   NULL, 0, NULL, 5000);
	submit(h3, 2, url("127.0.0.1", "/redirect?to=ftp%3A%2F%2F127.0.0.1%2Fx"), "GET",
		   NULL, 0, NULL, 5000);
	submit(h3, 3, url("127.0.0.1", "/redirect?to=/redirect%3Fto%3D/redirect%253Fto%253D"
					  "/redirect%25253Fto%25253D/redirect%2525253Fto%2525253D/ok"),
		   "GET", NULL, 0, NULL, 5000);
	run_until(h3, c, 3, 5000);
	CHECK(c->n == 3);
	r = by_id(c, 1);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 429 && r->retry_after_ms == 7000);
	CHECK(r && r->body && strcmp(r->body, "status 429") == 0);
	r = by_id(c, 2);
	CHECK(r && r->error_kind == JF_HTTP_REDIRECT && r->error[0] != '\0');
	r = by_id(c, 3);
	CHECK(r && r->error_kind == JF_HTTP_REDIRECT && r->http_status == 302);
	collected_free(c);
	free(c);
	jf_http_destroy(h3);
}

/*
 * deny_networks refuses connections by address at connect time: the
 * receiver is up, so a denied 127.0.0.1 proves the check ran before the
 * connection, and a redirect to a denied address is refused too.
 */
static void
test_deny_networks(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	JfHttpResult *r;
	char		err[128];
	char		redirect[256];

	CHECK(jf_http_check_networks(NULL, err, sizeof(err)));
	CHECK(jf_http_check_networks("", err, sizeof(err)));
	CHECK(jf_http_check_networks(" 169.254.0.0/16, fe80::/10 ,10.0.0.1", err, sizeof(err)));
	CHECK(jf_http_check_networks("::ffff:0:0/96", err, sizeof(err)));
	CHECK(!jf_http_check_networks("169.254.0.0/33", err, sizeof(err)));
	CHECK(strstr(err, "prefix length") != NULL);
	CHECK(!jf_http_check_networks("10.0.0.0/8, example.com", err, sizeof(err)));
	CHECK(strstr(err, "example.com") != NULL);
	CHECK(!jf_http_check_networks("fe80::/", err, sizeof(err)));
	CHECK(jf_http_create(&(JfHttpConfig) {.max_concurrent = 1, .max_per_host = 1,
				.deny_networks = "bogus"}, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "bogus") != NULL);

	cfg.deny_networks = "127.0.0.2/32";
	cfg.max_redirects = 3;
	h = make(&cfg);
	snprintf(redirect, sizeof(redirect), "/redirect?to=http%%3A%%2F%%2F127.0.0.2%%3A%d%%2Fok",
			 port);
	submit(h, 1, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL, 5000);
	submit(h, 2, url("127.0.0.2", "/ok"), "GET", NULL, 0, NULL, 5000);
	submit(h, 3, url("127.0.0.1", redirect), "GET", NULL, 0, NULL, 5000);
	run_until(h, c, 3, 5000);
	CHECK(c->n == 3);
	r = by_id(c, 1);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 200);
	r = by_id(c, 2);
	CHECK(r && r->error_kind == JF_HTTP_INVALID && strstr(r->error, "deny_networks") != NULL);
	r = by_id(c, 3);
	CHECK(r && r->error_kind == JF_HTTP_INVALID);
	collected_free(c);
	jf_http_destroy(h);

	/* a whole prefix, and the receiver's own address */
	cfg.deny_networks = "127.0.0.0/8";
	h = make(&cfg);
	submit(h, 4, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL, 5000);
	run_until(h, c, 1, 5000);
	CHECK(c->n == 1 && c->r[0].error_kind == JF_HTTP_INVALID);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}


/* How many requests with this task id the receiver's JSON list holds. */
static int
count_records(const char *json, int64_t id)
{
	char		needle[64];
	const char *p = json;
	int			n = 0;

	snprintf(needle, sizeof(needle), "\"x-jobflow-task-id\": \"%lld\"", (long long) id);
	while ((p = strstr(p, needle)) != NULL)
	{
		n++;
		p += strlen(needle);
	}
	return n;
}

/* The client port the receiver saw for this task id's request, or -1. */
static int
peer_port_of(const char *json, int64_t id)
{
	char	   *rec = record_of(json, id);
	char	   *p = rec ? strstr(rec, "\"peer_port\": ") : NULL;
	int			v = p ? atoi(p + strlen("\"peer_port\": ")) : -1;

	free(rec);
	return v;
}

/* Submit one request and wait for its result alone. */
static void
one(JfHttp *h, Collected *c, int64_t id, const char *u, const char *method,
	const char *const *headers, int nheaders, const char *body)
{
	int			before = c->n;

	submit(h, id, u, method, headers, nheaders, body, 5000);
	run_until(h, c, before + 1, 8000);
}

/*
 * Item 9: a reused connection that the server closes after reading the
 * request, without answering.  curl would re-send the request on a fresh
 * connection under the same attempt (Curl_retry_request); the dispatcher
 * refuses that re-send, so the receiver sees each request once and the
 * result says it may have been delivered.  Keep-alive itself is kept:
 * consecutive requests share a connection.
 */
static void
test_no_silent_resend(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h = make(&cfg);
	Collected  *c = calloc(1, sizeof(Collected));
	JfHttpResult *r;
	char	   *json;

	reset_receiver();
	one(h, c, 901, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL);
	one(h, c, 902, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL);
	one(h, c, 903, url("127.0.0.1", "/drop"), "GET", NULL, 0, NULL);
	one(h, c, 904, url("127.0.0.1", "/ok"), "POST", NULL, 0, "x=1");
	one(h, c, 905, url("127.0.0.1", "/drop"), "POST", NULL, 0, "x=2");
	CHECK(c->n == 5);
	r = by_id(c, 902);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 200);
	r = by_id(c, 903);
	CHECK(r && r->error_kind == JF_HTTP_NO_ANSWER && r->http_status == 0);
	CHECK(r && strstr(r->error, "may have been delivered") != NULL);
	r = by_id(c, 905);
	CHECK(r && r->error_kind == JF_HTTP_NO_ANSWER);
	collected_free(c);
	free(c);
	jf_http_destroy(h);

	json = fetch("GET", "/_requests");
	CHECK(count_records(json, 903) == 1);
	CHECK(count_records(json, 905) == 1);
	/* the dropped requests went out on reused connections */
	CHECK(peer_port_of(json, 901) > 0 && peer_port_of(json, 901) == peer_port_of(json, 902));
	CHECK(peer_port_of(json, 902) == peer_port_of(json, 903));
	CHECK(peer_port_of(json, 904) == peer_port_of(json, 905));
	free(json);
}

/*
 * A recycled handle must not carry libcurl's count of its silent re-sends
 * from one request to the next: past five (CONN_MAX_RETRIES) over any
 * requests, curl would give up on the next dead kept connection without
 * trying, with another error, and the request would no longer be known as
 * possibly delivered.  One handle serves all of these (max_concurrent 1).
 */
static void
test_recycled_handle_resends(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	JfHttpResult *r;

	cfg.max_concurrent = 1;
	cfg.max_per_host = 1;
	h = make(&cfg);
	reset_receiver();
	for (int i = 0; i < 7; i++)
	{
		one(h, c, 1710 + 2 * i, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL);
		one(h, c, 1711 + 2 * i, url("127.0.0.1", "/drop"), "GET", NULL, 0, NULL);
		r = by_id(c, 1711 + 2 * i);
		CHECKF(r && r->error_kind == JF_HTTP_NO_ANSWER, "drop %d: %s", i,
			   r ? r->error : "no result");
	}
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/*
 * Items 13 and 14, by address: unspecified addresses are refused whatever
 * the list, and every IPv6 form carrying an IPv4 address is checked as
 * that address.  (Only the classification: some of these forms would be
 * routed off the machine if the check ever let them through.)
 */
static void
test_address_forms(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *none,
			   *lo;
	static const char *const always[] = {
		"0.0.0.0", "0.1.2.3", "::", "::ffff:0.0.0.0", "::ffff:0.0.0.1",
		"::0.0.0.2", "64:ff9b::", "::ffff:0:0.0.0.0", "2002::1", "2001:0:0:0::ffff:ffff"
	};
	static const char *const loopback4[] = {
		"127.0.0.1", "127.1.2.3", "::ffff:127.0.0.1", "::127.0.0.1", "::7f00:1",
		"64:ff9b::7f00:1", "64:ff9b::127.0.0.1", "::ffff:0:127.0.0.1",
		"2002:7f00:1::1", "2001:0:7f00:1::1", "2001:0:4136:e378:8000:63bf:80ff:fffe"
	};
	static const char *const allowed[] = {
		"::1", "192.0.2.1", "2001:db8::1", "64:ff9b::c000:201", "::ffff:192.0.2.1",
		"2002:c000:201::1", "fe80::1"
	};

	cfg.deny_networks = "";
	none = make(&cfg);
	cfg.deny_networks = "127.0.0.0/8, fe80::/10";
	lo = make(&cfg);
	for (size_t i = 0; i < sizeof(always) / sizeof(always[0]); i++)
	{
		if (!jf_http_address_denied(none, always[i], 80))
			fprintf(stderr, "not refused: %s\n", always[i]);
		CHECK(jf_http_address_denied(none, always[i], 80));
		CHECK(jf_http_address_denied(lo, always[i], 80));
	}
	for (size_t i = 0; i < sizeof(loopback4) / sizeof(loopback4[0]); i++)
	{
		if (!jf_http_address_denied(lo, loopback4[i], 80))
			fprintf(stderr, "not refused: %s\n", loopback4[i]);
		CHECK(jf_http_address_denied(lo, loopback4[i], 80));
		CHECK(!jf_http_address_denied(none, loopback4[i], 80));
	}
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
	{
		CHECK(!jf_http_address_denied(none, allowed[i], 80));
		CHECK(jf_http_address_denied(lo, allowed[i], 80) == (strcmp(allowed[i], "fe80::1") == 0));
	}
	CHECK(jf_http_address_denied(none, "not-an-address", 80));
	CHECK(jf_http_address_denied(none, NULL, 80));
	jf_http_destroy(none);
	jf_http_destroy(lo);
}

/*
 * Item 13, end to end: every spelling of "this host" that the kernel
 * would connect to loopback is refused before connecting, with an empty
 * deny list, names resolved through fixed answers included; and the
 * IPv4-mapped loopback is refused by a loopback entry.  The receiver on
 * 127.0.0.1 sees none of them.
 */
static void
test_unspecified_refused(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	char		fix1[64],
				fix2[64];
	const char *resolve[3] = {fix1, fix2, NULL};
	const char *const hosts[] = {
		"0.0.0.0", "0", "[::ffff:0.0.0.0]", "[::]", "0x0", "zero.test", "zero6.test"
	};
	int			nh = sizeof(hosts) / sizeof(hosts[0]);
	char	   *json;

	snprintf(fix1, sizeof(fix1), "zero.test:%d:0.0.0.0", port);
	snprintf(fix2, sizeof(fix2), "zero6.test:%d:[::ffff:0.0.0.0]", port);
	reset_receiver();
	cfg.deny_networks = "";
	cfg.resolve = resolve;
	h = make(&cfg);
	for (int i = 0; i < nh; i++)
		submit(h, 1300 + i, url(hosts[i], "/ok"), "GET", NULL, 0, NULL, 5000);
	run_until(h, c, nh, 8000);
	CHECK(c->n == nh);
	for (int i = 0; i < nh; i++)
	{
		JfHttpResult *r = by_id(c, 1300 + i);

		if (!r || r->error_kind != JF_HTTP_INVALID)
			fprintf(stderr, "%s: kind %d status %d %s\n", hosts[i], r ? r->error_kind : -1,
					r ? r->http_status : -1, r ? r->error : "");
		CHECK(r && r->error_kind == JF_HTTP_INVALID && strstr(r->error, "deny_networks"));
	}
	collected_free(c);
	jf_http_destroy(h);

	cfg.deny_networks = "127.0.0.0/8";
	cfg.resolve = NULL;
	h = make(&cfg);
	submit(h, 1320, url("[::ffff:127.0.0.1]", "/ok"), "GET", NULL, 0, NULL, 5000);
	run_until(h, c, 1, 5000);
	CHECK(c->n == 1 && c->r[0].error_kind == JF_HTTP_INVALID);
	collected_free(c);
	free(c);
	jf_http_destroy(h);

	json = fetch("GET", "/_requests");
	for (int i = 0; i < nh; i++)
		CHECK(count_records(json, 1300 + i) == 0);
	CHECK(count_records(json, 1320) == 0);
	free(json);
}

/*
 * Item 15: a tightened deny list applies to the very next request, even
 * over an idle keep-alive connection opened before (no new socket, so
 * the open-socket check alone would not see it).
 */
static void
test_deny_applies_to_reused(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	JfHttpResult *r;
	char	   *json;

	reset_receiver();
	cfg.deny_networks = "169.254.0.0/16";
	h = make(&cfg);
	one(h, c, 1501, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL);
	cfg.deny_networks = "169.254.0.0/16, 127.0.0.0/8";
	CHECK(jf_http_set_config(h, &cfg));
	one(h, c, 1502, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL);
	cfg.deny_networks = "169.254.0.0/16";
	CHECK(jf_http_set_config(h, &cfg));
	one(h, c, 1503, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL);
	CHECK(c->n == 3);
	r = by_id(c, 1501);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 200);
	r = by_id(c, 1502);
	CHECK(r && r->error_kind == JF_HTTP_INVALID && strstr(r->error, "deny_networks"));
	r = by_id(c, 1503);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 200);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
	json = fetch("GET", "/_requests");
	CHECK(count_records(json, 1501) == 1);
	CHECK(count_records(json, 1502) == 0);
	free(json);
}

/*
 * Item 16: two receivers on 127.0.0.1, different ports, so different
 * origins.  By default a redirect to the other one is not followed (a
 * same-origin one is, with the task's headers); when allowed, the task's
 * headers stay behind and a request with a body is not redirected.
 */
static void
test_cross_origin_redirects(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	const char *hdrs[] = {"X-Api-Key: k-secret", "X-Test: yes"};
	char		to_other[256],
				to_other307[300],
				same[256];
	JfHttpResult *r;
	char	   *json,
			   *rec;

	if (!harness_start_second())
	{
		CHECK(!"could not start a second receiver");
		free(c);
		return;
	}
	snprintf(to_other, sizeof(to_other), "/redirect?to=http%%3A%%2F%%2F127.0.0.1%%3A%d%%2Fecho",
			 port2);
	snprintf(to_other307, sizeof(to_other307), "%s&status=307", to_other);
	snprintf(same, sizeof(same), "/redirect?to=http%%3A%%2F%%2F127.0.0.1%%3A%d%%2Fecho&status=307",
			 port);
	reset_receiver();
	free(fetch_from(port2, "POST", "/_reset"));

	cfg.max_redirects = 3;
	h = make(&cfg);
	one(h, c, 1601, url("127.0.0.1", to_other), "GET", hdrs, 2, NULL);
	one(h, c, 1602, url("127.0.0.1", to_other307), "POST", hdrs, 2, "body-1602");
	one(h, c, 1603, url("127.0.0.1", same), "POST", hdrs, 2, "body-1603");
	CHECK(c->n == 3);
	r = by_id(c, 1601);
	CHECK(r && r->error_kind == JF_HTTP_REDIRECT && strstr(r->error, "another origin"));
	r = by_id(c, 1602);
	CHECK(r && r->error_kind == JF_HTTP_REDIRECT);
	r = by_id(c, 1603);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 200);
	CHECK(r && r->body && strcmp(r->body, "body-1603") == 0);
	collected_free(c);
	jf_http_destroy(h);

	cfg.follow_cross_origin = true;
	h = make(&cfg);
	one(h, c, 1604, url("127.0.0.1", to_other), "GET", hdrs, 2, NULL);
	one(h, c, 1605, url("127.0.0.1", to_other307), "POST", hdrs, 2, "body-1605");
	CHECK(c->n == 2);
	r = by_id(c, 1604);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 200);
	r = by_id(c, 1605);
	CHECK(r && r->error_kind == JF_HTTP_REDIRECT && strstr(r->error, "body"));
	collected_free(c);
	free(c);
	jf_http_destroy(h);

	/* the same-origin hop kept its headers; the other origin got one GET */
	json = fetch("GET", "/_requests");
	CHECK(count_records(json, 1603) == 2);
	rec = record_of(json, 1603);
	CHECK(rec && strstr(rec, "\"x-api-key\": \"k-secret\""));
	free(rec);
	free(json);
	json = fetch_from(port2, "GET", "/_requests");
	CHECK(count_records(json, 1601) == 0);
	CHECK(count_records(json, 1602) == 0);
	CHECK(count_records(json, 1605) == 0);
	CHECK(count_records(json, 1604) == 1);
	CHECK(strstr(json, "k-secret") == NULL && strstr(json, "x-test") == NULL);
	CHECK(strstr(json, "body-") == NULL);
	free(json);
}

/*
 * Every result lands in one metrics class: the kind decides first, then
 * curl's code tells a name that did not resolve, a refused port and a TLS
 * failure apart; real transfers show the same (a name resolved through a
 * DNS-over-HTTPS URL that answers nothing, https:// to a plain-HTTP
 * server, a closed port).
 */
static void
test_outcome_classes(void)
{
	static const int tls_codes[] = {
		CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM,
		CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR,
		CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS, CURLE_SSL_CLIENTCERT,
		CURLE_SSL_SHUTDOWN_FAILED, CURLE_SSL_ENGINE_NOTFOUND, CURLE_USE_SSL_FAILED
	};
	JfHttpResult r;
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	char		doh[96],
				u1[96],
				u2[96],
				u3[96];
	int			cp = closed_port();
	int			seen[JF_NCLASS] = {0};

	memset(&r, 0, sizeof(r));
	r.error_kind = JF_HTTP_OK;
	r.http_status = 204;
	CHECK(jf_http_result_class(&r) == JF_CLASS_2XX);
	r.http_status = 301;
	CHECK(jf_http_result_class(&r) == JF_CLASS_3XX);
	r.http_status = 429;
	CHECK(jf_http_result_class(&r) == JF_CLASS_4XX);
	r.http_status = 599;
	CHECK(jf_http_result_class(&r) == JF_CLASS_5XX);
	r.http_status = 101;
	CHECK(jf_http_result_class(&r) == JF_CLASS_OTHER);
	r.http_status = 0;
	r.error_kind = JF_HTTP_CONNECT;
	r.curl_code = CURLE_COULDNT_RESOLVE_HOST;
	CHECK(jf_http_result_class(&r) == JF_CLASS_DNS);
	r.curl_code = CURLE_COULDNT_RESOLVE_PROXY;
	CHECK(jf_http_result_class(&r) == JF_CLASS_DNS);
	r.curl_code = CURLE_COULDNT_CONNECT;
	CHECK(jf_http_result_class(&r) == JF_CLASS_CONNECT);
	r.error_kind = JF_HTTP_OTHER;
	for (size_t i = 0; i < sizeof(tls_codes) / sizeof(tls_codes[0]); i++)
	{
		r.curl_code = tls_codes[i];
		CHECKF(jf_http_result_class(&r) == JF_CLASS_TLS, "curl code %d", tls_codes[i]);
	}
	r.curl_code = CURLE_RECV_ERROR;
	CHECK(jf_http_result_class(&r) == JF_CLASS_OTHER);
	/* a TLS alert after the handshake (TLS 1.3: a client certificate refused) */
	snprintf(r.error, sizeof(r.error), "%s",
			 "OpenSSL SSL_read: OpenSSL/3.0.19: error:0A00045C:SSL routines::tlsv13 alert certificate required, errno 0");
	CHECK(jf_http_result_class(&r) == JF_CLASS_TLS);
	r.curl_code = CURLE_SEND_ERROR;
	CHECK(jf_http_result_class(&r) == JF_CLASS_TLS);
	snprintf(r.error, sizeof(r.error), "%s", "Send failure: Connection reset by peer");
	CHECK(jf_http_result_class(&r) == JF_CLASS_OTHER);
	r.error[0] = '\0';
	/* jobflow's own reasons win over the code curl stopped with */
	r.error_kind = JF_HTTP_INVALID;
	r.curl_code = CURLE_COULDNT_CONNECT;
	CHECK(jf_http_result_class(&r) == JF_CLASS_DENIED);
	r.error_kind = JF_HTTP_NO_ANSWER;
	r.curl_code = CURLE_ABORTED_BY_CALLBACK;
	CHECK(jf_http_result_class(&r) == JF_CLASS_NO_ANSWER);
	r.error_kind = JF_HTTP_REDIRECT;
	CHECK(jf_http_result_class(&r) == JF_CLASS_REDIRECT);
	r.error_kind = JF_HTTP_TIMEOUT;
	r.curl_code = CURLE_OPERATION_TIMEDOUT;
	CHECK(jf_http_result_class(&r) == JF_CLASS_TIMEOUT);
	/* every code of every kind has one class with a name of its own */
	for (int kind = JF_HTTP_OK; kind <= JF_HTTP_REDIRECT; kind++)
		for (int code = 0; code < CURL_LAST; code++)
		{
			JfHttpClass k;

			r.error_kind = kind;
			r.curl_code = code;
			r.http_status = kind == JF_HTTP_OK ? 200 : 0;
			k = jf_http_result_class(&r);
			CHECK((int) k >= 0 && k < JF_NCLASS);
			seen[k] = 1;
		}
	for (int k = 0; k < JF_NCLASS; k++)
		for (int j = 0; j < k; j++)
			CHECK(strcmp(jf_http_class_name(k), jf_http_class_name(j)) != 0);
	CHECK(seen[JF_CLASS_DNS] && seen[JF_CLASS_TLS] && seen[JF_CLASS_CONNECT]);
	CHECK(strcmp(jf_http_class_name(JF_CLASS_DNS), "dns") == 0);
	CHECK(strcmp(jf_http_class_name(JF_CLASS_TLS), "tls") == 0);

	/* real transfers; no DNS server is asked: the DoH URL is loopback */
	snprintf(doh, sizeof(doh), "http://127.0.0.1:%d/dns-query", cp);
	cfg.doh_url = doh;
	h = make(&cfg);
	snprintf(u1, sizeof(u1), "http://no-such-host.invalid:%d/x", port);
	snprintf(u2, sizeof(u2), "https://127.0.0.1:%d/ok", port);
	snprintf(u3, sizeof(u3), "http://127.0.0.1:%d/x", cp);
	submit(h, 1, u1, "GET", NULL, 0, NULL, 5000);
	submit(h, 2, u2, "GET", NULL, 0, NULL, 5000);
	submit(h, 3, u3, "GET", NULL, 0, NULL, 5000);
	run_until(h, c, 3, 8000);
	CHECK(c->n == 3);
	CHECKF(by_id(c, 1) && jf_http_result_class(by_id(c, 1)) == JF_CLASS_DNS,
		   "%d %s", by_id(c, 1) ? by_id(c, 1)->curl_code : -1, by_id(c, 1) ? by_id(c, 1)->error : "");
	CHECK(by_id(c, 1) && by_id(c, 1)->error_kind == JF_HTTP_CONNECT);
	CHECKF(by_id(c, 2) && jf_http_result_class(by_id(c, 2)) == JF_CLASS_TLS,
		   "%d %s", by_id(c, 2) ? by_id(c, 2)->curl_code : -1, by_id(c, 2) ? by_id(c, 2)->error : "");
	CHECK(by_id(c, 3) && jf_http_result_class(by_id(c, 3)) == JF_CLASS_CONNECT);
	collected_free(c);
	free(c);
	jf_http_destroy(h);
}

/*
 * Issue 20, item 7: the syntax of deny_networks and allow_networks, ports
 * included, and what the lists decide, by address only (no traffic: some
 * of these addresses would leave the machine if a check ever let them
 * through).  The default deny list refuses every range it is documented
 * to; allow_networks lets an address through that a deny entry covers,
 * each address a connection reaches judged on its own; unspecified
 * addresses stay refused whatever the lists.
 */
static void
test_network_lists(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *def,
			   *h;
	char		err[128];
	static const char *const good[] = {
		"10.1.2.0/24:443", "10.1.2.3:8080", "[2001:db8::]/32:8443", "[::1]", "[::1]:80",
		"[fe80::]/10", "::1/128", "0.0.0.0/0", "::/0", " 10.0.0.0/8 ,, [::1]:1\t192.0.2.1:65535 "
	};
	static const struct
	{
		const char *list;
		const char *why;
	}			bad[] = {
		{"10.0.0.0/8:0", "invalid port"},
		{"10.0.0.0/8:65536", "invalid port"},
		{"10.0.0.1:", "invalid port"},
		{"10.0.0.1:+80", "invalid port"},
		{"10.0.0.1:80:81", "invalid port"},
		{"10.0.0.0/33", "prefix length"},
		{"10.0.0.0/+8", "prefix length"},
		{"10.0.0.0/8x", "prefix length"},
		{"fe80::/10:443", "not between brackets"},
		{"::1:443x", "not an address"},
		{"[::1/128]", "between its brackets"},
		{"[10.0.0.1]:80", "between its brackets"},
		{"[::1", "unclosed bracket"},
		{"[::1]x", "after its address"},
		{"[::1]/129", "prefix length"},
		{"example.com:80", "not an address"},
	};
	/* one address of each range the default list must refuse */
	static const char *const refused_by_default[] = {
		"127.0.0.1", "127.255.255.254", "::1",
		"10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255", "192.168.1.1",
		"169.254.169.254", "169.254.0.1", "fe80::1", "febf::1",
		"fc00::1", "fd00::1", "fd00:ec2::254",
		"100.64.0.1", "100.127.255.255", "100.100.100.200",
		"64:ff9b::808:808", "64:ff9b:1::1", "64:ff9b:1:ffff::1",
		"224.0.0.1", "239.255.255.250", "ff02::1", "ff05::2",
		"255.255.255.255", "240.0.0.1", "250.1.2.3",
		/* IPv4 carried in IPv6, each judged as that IPv4 address */
		"::ffff:10.0.0.1", "::ffff:127.0.0.1", "2002:a00:1::1", "::ffff:169.254.169.254"
	};
	/* public addresses, and the edges just outside the ranges */
	static const char *const public_addrs[] = {
		"192.0.2.1", "8.8.8.8", "1.1.1.1", "11.0.0.1", "172.15.255.255", "172.32.0.1",
		"192.167.255.255", "192.169.0.1", "100.63.255.255", "100.128.0.1", "126.255.255.255",
		"128.0.0.1", "169.253.255.255", "169.255.0.1", "223.255.255.255",
		"2001:db8::1", "2606:4700::1111", "fbff::1", "fec0::1", "64:ff9a::1",
		"64:ff9b:2::1", "feff::1", "::ffff:192.0.2.1", "2002:c000:201::1"
	};
	static const char *const never[] = {
		"0.0.0.0", "0.1.2.3", "::", "::ffff:0.0.0.0", "::0.0.0.2"
	};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECKF(jf_http_check_networks(good[i], err, sizeof(err)), "%s: %s", good[i], err);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
	{
		err[0] = '\0';
		CHECKF(!jf_http_check_networks(bad[i].list, err, sizeof(err)), "%s accepted", bad[i].list);
		CHECKF(strstr(err, bad[i].why) != NULL, "%s: %s", bad[i].list, err);
	}
	CHECK(jf_http_check_networks(JF_HTTP_DEFAULT_DENY_NETWORKS, err, sizeof(err)));
	CHECK(jf_http_create(&(JfHttpConfig) {.max_concurrent = 1, .max_per_host = 1,
				.allow_networks = "10.0.0.0/8:0"}, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "10.0.0.0/8:0") != NULL);

	cfg.deny_networks = JF_HTTP_DEFAULT_DENY_NETWORKS;
	def = make(&cfg);
	for (size_t i = 0; i < sizeof(refused_by_default) / sizeof(refused_by_default[0]); i++)
		CHECKF(jf_http_address_denied(def, refused_by_default[i], 443), "%s", refused_by_default[i]);
	for (size_t i = 0; i < sizeof(public_addrs) / sizeof(public_addrs[0]); i++)
		CHECKF(!jf_http_address_denied(def, public_addrs[i], 443), "%s", public_addrs[i]);

	/* allowed: loopback and one private network, any port */
	cfg.allow_networks = "127.0.0.0/8, ::1/128, 10.1.0.0/16";
	h = make(&cfg);
	CHECK(!jf_http_address_denied(h, "127.0.0.1", 5432));
	CHECK(!jf_http_address_denied(h, "::1", 80));
	CHECK(!jf_http_address_denied(h, "::ffff:127.0.0.1", 80));	/* the same host */
	CHECK(!jf_http_address_denied(h, "10.1.2.3", 443));
	CHECK(jf_http_address_denied(h, "10.2.0.1", 443));
	CHECK(jf_http_address_denied(h, "192.168.1.1", 443));
	CHECK(jf_http_address_denied(h, "169.254.169.254", 80));
	/* NAT64 to an allowed address: the NAT64 prefix itself is denied */
	CHECK(jf_http_address_denied(h, "64:ff9b::7f00:1", 80));
	/* 6to4 whose relay is allowed: passes only if nothing denies it */
	CHECK(!jf_http_address_denied(h, "2002:a01:203::1", 80));
	/* Teredo: server 10.1.2.3 allowed, client 192.168.1.1 not */
	CHECK(jf_http_address_denied(h, "2001:0:a01:203::3f57:fefe", 80));
	CHECK(!jf_http_address_denied(h, "2001:0:a01:203::f5fe:fffe", 80));
	for (size_t i = 0; i < sizeof(public_addrs) / sizeof(public_addrs[0]); i++)
		CHECK(!jf_http_address_denied(h, public_addrs[i], 443));
	jf_http_destroy(h);

	/* NAT64 allowed: the IPv4 addresses behind it are judged as themselves */
	cfg.allow_networks = "64:ff9b::/96";
	h = make(&cfg);
	CHECK(!jf_http_address_denied(h, "64:ff9b::808:808", 443));
	CHECK(jf_http_address_denied(h, "64:ff9b::a00:1", 443));
	CHECK(jf_http_address_denied(h, "64:ff9b::7f00:1", 443));
	jf_http_destroy(h);

	/* ports: an allow entry with a port allows that port only */
	cfg.allow_networks = "10.1.2.0/24:443, [fd00::]/8:8443, [::1]:8080, 127.0.0.1:80";
	h = make(&cfg);
	CHECK(!jf_http_address_denied(h, "10.1.2.3", 443));
	CHECK(jf_http_address_denied(h, "10.1.2.3", 80));
	CHECK(jf_http_address_denied(h, "10.1.3.1", 443));
	CHECK(!jf_http_address_denied(h, "fd12::1", 8443));
	CHECK(jf_http_address_denied(h, "fd12::1", 443));
	CHECK(jf_http_address_denied(h, "fe80::1", 8443));
	CHECK(!jf_http_address_denied(h, "::1", 8080));
	CHECK(jf_http_address_denied(h, "::1", 5432));
	CHECK(!jf_http_address_denied(h, "127.0.0.1", 80));
	CHECK(!jf_http_address_denied(h, "::ffff:127.0.0.1", 80));
	CHECK(jf_http_address_denied(h, "127.0.0.1", 5432));
	CHECK(jf_http_address_denied(h, "127.0.0.2", 80));
	jf_http_destroy(h);

	/* a deny entry with a port refuses that port only */
	cfg.deny_networks = "192.0.2.0/24:25, [2001:db8::]/32:22";
	cfg.allow_networks = NULL;
	h = make(&cfg);
	CHECK(jf_http_address_denied(h, "192.0.2.7", 25));
	CHECK(!jf_http_address_denied(h, "192.0.2.7", 443));
	CHECK(jf_http_address_denied(h, "2001:db8::7", 22));
	CHECK(!jf_http_address_denied(h, "2001:db8::7", 443));
	CHECK(!jf_http_address_denied(h, "127.0.0.1", 25));
	jf_http_destroy(h);

	/* unspecified addresses: refused even when everything is allowed */
	cfg.deny_networks = JF_HTTP_DEFAULT_DENY_NETWORKS;
	cfg.allow_networks = "0.0.0.0/0, ::/0";
	h = make(&cfg);
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
		CHECKF(jf_http_address_denied(h, never[i], 80), "%s", never[i]);
	for (size_t i = 0; i < sizeof(refused_by_default) / sizeof(refused_by_default[0]); i++)
		CHECK(!jf_http_address_denied(h, refused_by_default[i], 80));
	jf_http_destroy(h);
	cfg.deny_networks = "";
	cfg.allow_networks = "";
	h = make(&cfg);
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
		CHECK(jf_http_address_denied(h, never[i], 80));
	jf_http_destroy(h);
	jf_http_destroy(def);
}

/*
 * Issue 20, item 7, end to end on loopback: the default deny list refuses
 * the receiver before connecting (it sees nothing); allow_networks lets it
 * through, by network or by network and port (another port of the same
 * address stays refused, not merely closed); and a new configuration
 * without the allow entry refuses the very next request on the kept-alive
 * connection.
 */
static void
test_allow_networks(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	JfHttpResult *r;
	char		by_port[64];
	char	   *json;
	int			cp = closed_port();

	reset_receiver();
	cfg.deny_networks = JF_HTTP_DEFAULT_DENY_NETWORKS;
	h = make(&cfg);
	one(h, c, 2001, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL);
	one(h, c, 2002, url("localhost", "/ok"), "GET", NULL, 0, NULL);
	r = by_id(c, 2001);
	CHECK(r && r->error_kind == JF_HTTP_INVALID && strstr(r->error, "deny_networks"));
	r = by_id(c, 2002);
	CHECK(r && r->error_kind == JF_HTTP_INVALID && strstr(r->error, "allow_networks"));

	cfg.allow_networks = "127.0.0.0/8";
	CHECK(jf_http_set_config(h, &cfg));
	one(h, c, 2003, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL);
	one(h, c, 2004, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL);
	r = by_id(c, 2003);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 200);
	/* the allow entry goes: the idle connection is not used again */
	cfg.allow_networks = "";
	CHECK(jf_http_set_config(h, &cfg));
	one(h, c, 2005, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL);
	r = by_id(c, 2005);
	CHECK(r && r->error_kind == JF_HTTP_INVALID && strstr(r->error, "deny_networks"));

	/* by port: the receiver's port passes, another port is refused */
	snprintf(by_port, sizeof(by_port), "127.0.0.1/32:%d", port);
	cfg.allow_networks = by_port;
	CHECK(jf_http_set_config(h, &cfg));
	one(h, c, 2006, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL);
	one(h, c, 2007, url_at("127.0.0.1", cp, "/ok"), "GET", NULL, 0, NULL);
	r = by_id(c, 2006);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 200);
	r = by_id(c, 2007);
	CHECK(r && r->error_kind == JF_HTTP_INVALID && strstr(r->error, "deny_networks"));
	CHECK(c->n == 7);
	collected_free(c);
	free(c);
	jf_http_destroy(h);

	json = fetch("GET", "/_requests");
	CHECK(count_records(json, 2001) == 0 && count_records(json, 2002) == 0);
	CHECK(count_records(json, 2003) == 1 && count_records(json, 2004) == 1);
	/* 2004 went out on 2003's connection, which 2005 then found idle */
	CHECK(peer_port_of(json, 2003) > 0 && peer_port_of(json, 2003) == peer_port_of(json, 2004));
	CHECK(count_records(json, 2005) == 0);
	CHECK(count_records(json, 2006) == 1);
	free(json);
}

/*
 * Issue 20, item 8: a receiver that sends its status, then a body without
 * end.  The transfer stops once the excerpt is full, long before the
 * request's timeout; the result is the response's (status, excerpt,
 * truncated), and the request's place is free for the next one to the
 * host (one per host here).
 */
static void
test_endless_body(void)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	JfHttpResult *r;
	int64_t		start = mono_ms();

	cfg.max_response_bytes = 1000;
	cfg.max_per_host = 1;
	h = make(&cfg);
	submit(h, 1, url("127.0.0.1", "/stream?seconds=60"), "GET", NULL, 0, NULL, 60000);
	submit(h, 2, url("127.0.0.1", "/stream?status=503&seconds=60"), "GET", NULL, 0, NULL, 60000);
	submit(h, 3, url("127.0.0.1", "/ok"), "GET", NULL, 0, NULL, 60000);
	run_until(h, c, 3, 30000);
	CHECK(c->n == 3);
	CHECKF(mono_ms() - start < 20000, "%lld ms", (long long) (mono_ms() - start));
	r = by_id(c, 1);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 200 && r->error[0] == '\0');
	CHECK(r && r->body_len == 1000 && r->body_truncated && r->body && r->body[999] == 'x');
	CHECK(r && jf_http_result_class(r) == JF_CLASS_2XX);
	r = by_id(c, 2);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 503 && r->body_truncated);
	CHECK(r && jf_http_result_class(r) == JF_CLASS_5XX);
	r = by_id(c, 3);
	CHECK(r && r->error_kind == JF_HTTP_OK && r->http_status == 200 && !r->body_truncated);
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
		return unit_done("test_http_requests");
	}

	test_ok_and_headers();
	test_status_and_retry_after();
	test_timeout_and_connect();
	test_methods_and_echo();
	test_recycled_handles();
	test_big_truncated();
	test_invalid();
	test_redirects();
	test_deny_networks();
	test_no_silent_resend();
	test_recycled_handle_resends();
	test_address_forms();
	test_unspecified_refused();
	test_deny_applies_to_reused();
	test_cross_origin_redirects();
	test_outcome_classes();
	test_network_lists();
	test_allow_networks();
	test_endless_body();

	harness_stop();
	return unit_done("test_http_requests");
}
