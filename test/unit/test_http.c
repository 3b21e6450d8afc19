/*-------------------------------------------------------------------------
 *
 * test_http.c
 *	  Unit test for the HTTP dispatcher (src/http.c).
 *
 * Spawns test/receiver.py on a free loopback port (JOBFLOW_RECEIVER can
 * point elsewhere) and drives dispatchers with a poll() loop on
 * jf_http_fd() + jf_http_timeout_ms(), the way the worker does.  What the
 * receiver saw is checked through its GET /_requests list.  Loopback only.
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http.h"

static int	npassed;
static int	nfailed;
static pid_t receiver_pid = -1;
static int	port;
static char port_file[64];

#define CHECK(cond) \
	do { \
		if (cond) npassed++; \
		else { nfailed++; fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } \
	} while (0)

#define MAX_RESULTS 512

typedef struct Collected
{
	JfHttpResult r[MAX_RESULTS];
	int			n;
	int			max_in_flight;
} Collected;

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------------
 * Receiver process
 * ---------------------------------------------------------------------
 */

static void
kill_receiver(void)
{
	if (receiver_pid > 0)
	{
		kill(receiver_pid, SIGTERM);
		waitpid(receiver_pid, NULL, 0);
		receiver_pid = -1;
	}
	if (port_file[0])
	{
		unlink(port_file);
		port_file[0] = '\0';
	}
}

static void
on_signal(int sig)
{
	kill_receiver();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Receiver path: $JOBFLOW_RECEIVER, else ../receiver.py next to this file. */
static void
receiver_path(char *buf, size_t len)
{
	const char *env = getenv("JOBFLOW_RECEIVER");
	const char *src = __FILE__;
	const char *slash = strrchr(src, '/');

	if (env && *env)
		snprintf(buf, len, "%s", env);
	else if (slash)
		snprintf(buf, len, "%.*s/../receiver.py", (int) (slash - src), src);
	else
		snprintf(buf, len, "../receiver.py");
}

static bool
start_receiver(void)
{
	char		path[1024];
	int64_t		deadline;

	receiver_path(path, sizeof(path));
	snprintf(port_file, sizeof(port_file), "/tmp/jf_test_http_port.%d", (int) getpid());
	unlink(port_file);
	atexit(kill_receiver);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGSEGV, on_signal);
	signal(SIGABRT, on_signal);

	receiver_pid = fork();
	if (receiver_pid < 0)
		return false;
	if (receiver_pid == 0)
	{
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		execl("/usr/bin/python3", "python3", path, "--port", "0",
			  "--port-file", port_file, (char *) NULL);
		_exit(127);
	}
	deadline = mono_ms() + 10000;
	while (mono_ms() < deadline)
	{
		FILE	   *f = fopen(port_file, "r");

		if (f)
		{
			int			ok = fscanf(f, "%d", &port);

			fclose(f);
			if (ok == 1 && port > 0)
				return true;
		}
		if (waitpid(receiver_pid, NULL, WNOHANG) == receiver_pid)
		{
			receiver_pid = -1;
			return false;
		}
		usleep(20000);
	}
	return false;
}

/* A loopback port with nothing listening: bind, read the port, close. */
static int
closed_port(void)
{
	struct sockaddr_in sa;
	socklen_t	sl = sizeof(sa);
	int			s = socket(AF_INET, SOCK_STREAM, 0);
	int			p;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(s, (struct sockaddr *) &sa, sizeof(sa)) != 0 ||
		getsockname(s, (struct sockaddr *) &sa, &sl) != 0)
		p = 1;
	else
		p = ntohs(sa.sin_port);
	close(s);
	return p;
}

/* ---------------------------------------------------------------------
 * Dispatcher helpers
 * ---------------------------------------------------------------------
 */

static JfHttpConfig
default_config(void)
{
	JfHttpConfig c;

	memset(&c, 0, sizeof(c));
	c.max_concurrent = 1000;
	c.max_per_host = 64;
	c.max_response_bytes = 64 * 1024;
	c.max_redirects = 0;
	c.user_agent = "jobflow-test/1.0";
	return c;
}

static JfHttp *
make(const JfHttpConfig *c)
{
	char		err[256];
	JfHttp	   *h = jf_http_create(c, err, sizeof(err));

	if (h == NULL)
	{
		fprintf(stderr, "jf_http_create: %s\n", err);
		exit(1);
	}
	return h;
}

static char *
url(const char *host, const char *path)
{
	static char buf[8][512];
	static int	i;

	i = (i + 1) % 8;
	snprintf(buf[i], sizeof(buf[i]), "http://%s:%d%s", host, port, path);
	return buf[i];
}

static bool
submit(JfHttp *h, int64_t id, const char *u, const char *method,
	   const char *const *headers, int nheaders, const char *body, int timeout_ms)
{
	JfHttpRequest r;

	memset(&r, 0, sizeof(r));
	r.task_id = id;
	r.attempt = 1;
	r.user = (void *) (intptr_t) (id * 10);
	r.url = u;
	r.method = method;
	r.headers = headers;
	r.nheaders = nheaders;
	r.body = body;
	r.body_len = body ? strlen(body) : 0;
	r.timeout_ms = timeout_ms;
	return jf_http_submit(h, &r);
}

/* The worker's loop in miniature: poll the fd with the dispatcher's timeout. */
static void
run_until(JfHttp *h, Collected *c, int want, int max_ms)
{
	int64_t		deadline = mono_ms() + max_ms;

	while (c->n < want && mono_ms() < deadline)
	{
		struct pollfd pfd = {.fd = jf_http_fd(h),.events = POLLIN};
		long		t = jf_http_timeout_ms(h);
		int64_t		left = deadline - mono_ms();

		if (t < 0 || t > left)
			t = left > 0 ? left : 0;
		poll(&pfd, 1, (int) t);
		jf_http_perform(h);
		if (jf_http_in_flight(h) > c->max_in_flight)
			c->max_in_flight = jf_http_in_flight(h);
		while (c->n < MAX_RESULTS && jf_http_next_result(h, &c->r[c->n]))
			c->n++;
	}
}

static void
collected_free(Collected *c)
{
	for (int i = 0; i < c->n; i++)
		jf_http_result_free(&c->r[i]);
	c->n = 0;
}

static JfHttpResult *
by_id(Collected *c, int64_t id)
{
	for (int i = 0; i < c->n; i++)
		if (c->r[i].task_id == id)
			return &c->r[i];
	return NULL;
}

/* One request on a throwaway dispatcher; returns the body (caller frees). */
static char *
fetch(const char *method, const char *path)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	char	   *body = NULL;

	cfg.max_response_bytes = 16 * 1024 * 1024;
	h = make(&cfg);
	submit(h, 0, url("127.0.0.1", path), method, NULL, 0, NULL, 5000);
	run_until(h, c, 1, 5000);
	if (c->n == 1 && c->r[0].http_status == 200 && c->r[0].body)
	{
		body = c->r[0].body;
		c->r[0].body = NULL;
	}
	collected_free(c);
	free(c);
	jf_http_destroy(h);
	return body ? body : strdup("");
}

static void
reset_receiver(void)
{
	free(fetch("POST", "/_reset"));
}

/* The receiver's JSON record of the request with this task id, or NULL. */
static char *
record_of(const char *json, int64_t id)
{
	char		needle[64];
	const char *p = json;

	snprintf(needle, sizeof(needle), "\"x-jobflow-task-id\": \"%lld\"", (long long) id);
	while ((p = strstr(p, "{\"time\"")) != NULL)
	{
		const char *end = strstr(p + 1, "{\"time\"");
		size_t		len = end ? (size_t) (end - p) : strlen(p);
		char	   *rec = strndup(p, len);

		if (strstr(rec, needle))
			return rec;
		free(rec);
		p += len;
	}
	return NULL;
}

/* Largest "inflight" among records whose path starts with prefix. */
static int
max_server_inflight(const char *json, const char *prefix)
{
	char		needle[128];
	const char *p = json;
	int			m = 0;

	snprintf(needle, sizeof(needle), "\"path\": \"%s", prefix);
	while ((p = strstr(p, "{\"time\"")) != NULL)
	{
		const char *end = strstr(p + 1, "{\"time\"");
		const char *path = strstr(p, "\"path\": \"");
		const char *inf = strstr(p, "\"inflight\": ");

		if (path && inf && (!end || inf < end) && strncmp(path, needle, strlen(needle)) == 0)
		{
			int			v = atoi(inf + strlen("\"inflight\": "));

			if (v > m)
				m = v;
		}
		p = end ? end : p + 1;
	}
	return m;
}

/* ---------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------
 */

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

/* Only the excerpt is kept, the rest is read and dropped; still a 200. */
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
	CHECK(r && r->error_kind == JF_HTTP_OTHER && r->error[0] != '\0');
	r = by_id(c, 3);
	CHECK(r && r->error_kind == JF_HTTP_OTHER && r->http_status == 302);
	collected_free(c);
	free(c);
	jf_http_destroy(h3);
}

/*
 * Per-host cap 2: six 300 ms requests run two at a time (client and
 * server agree), and queueing does not eat their 500 ms timeout.
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
	for (int i = 1; i <= 6; i++)
		submit(h, i, url("127.0.0.1", "/delay/300"), "GET", NULL, 0, NULL, 500);
	CHECK(jf_http_in_flight(h) == 2 && jf_http_queued(h) == 4);
	run_until(h, c, 6, 5000);
	CHECK(c->n == 6);
	for (int i = 0; i < c->n; i++)
	{
		CHECK(c->r[i].error_kind == JF_HTTP_OK && c->r[i].http_status == 200);
		if (c->r[i].started_at_ms - c->r[i].queued_at_ms > max_wait)
			max_wait = c->r[i].started_at_ms - c->r[i].queued_at_ms;
	}
	CHECK(max_wait >= 500);		/* the last two waited longer than their timeout */
	CHECK(c->max_in_flight == 2);
	CHECK(mono_ms() - t0 >= 850);
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
	char		err[256];

	/* only loopback here, and no proxy from the environment either */
	unsetenv("http_proxy");
	unsetenv("https_proxy");
	unsetenv("HTTP_PROXY");
	unsetenv("HTTPS_PROXY");
	unsetenv("ALL_PROXY");
	unsetenv("all_proxy");
	if (!jf_http_global_init(err, sizeof(err)))
	{
		fprintf(stderr, "jf_http_global_init: %s\n", err);
		return 1;
	}
	if (!start_receiver())
	{
		fprintf(stderr, "could not start the receiver\n");
		printf("test_http: %d passed, %d failed\n", npassed, nfailed + 1);
		return 1;
	}

	test_ok_and_headers();
	test_status_and_retry_after();
	test_timeout_and_connect();
	test_methods_and_echo();
	test_big_truncated();
	test_invalid();
	test_redirects();
	test_per_host_cap();
	test_global_cap_and_order();
	test_hung_host_isolation();
	test_set_config();
	test_many_concurrent();

	kill_receiver();
	jf_http_global_cleanup();
	printf("test_http: %d passed, %d failed\n", npassed, nfailed);
	return nfailed == 0 ? 0 : 1;
}
