/*-------------------------------------------------------------------------
 *
 * http_harness.c
 *	  The receiver and the driving loop shared by the HTTP unit tests.
 *
 * See http_harness.h.  Nothing here checks anything: the helpers report
 * what happened and the tests decide.
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

#include "http_harness.h"

/* receiver 0 on port, receiver 1 (started on demand) on port2 */
static pid_t receiver_pid[2] = {-1, -1};
int			port;
int			port2;
static char port_file[2][64];

int64_t
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
	for (int i = 0; i < 2; i++)
	{
		if (receiver_pid[i] > 0)
		{
			kill(receiver_pid[i], SIGTERM);
			waitpid(receiver_pid[i], NULL, 0);
			receiver_pid[i] = -1;
		}
		if (port_file[i][0])
		{
			unlink(port_file[i]);
			port_file[i][0] = '\0';
		}
	}
}

static void
on_signal(int sig)
{
	kill_receiver();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Receiver path: $JOBFLOW_RECEIVER, else test/receiver.py (two up from here). */
static void
receiver_path(char *buf, size_t len)
{
	const char *env = getenv("JOBFLOW_RECEIVER");
	const char *src = __FILE__;
	const char *slash = strrchr(src, '/');

	if (env && *env)
		snprintf(buf, len, "%s", env);
	else if (slash)
		snprintf(buf, len, "%.*s/../../receiver.py", (int) (slash - src), src);
	else
		snprintf(buf, len, "../../receiver.py");
}

static bool
start_receiver(int i, int *out_port)
{
	char		path[1024];
	int64_t		deadline;

	receiver_path(path, sizeof(path));
	snprintf(port_file[i], sizeof(port_file[i]), "/tmp/jf_test_http_port.%d.%d",
			 (int) getpid(), i);
	unlink(port_file[i]);
	if (i == 0)
	{
		atexit(kill_receiver);
		signal(SIGINT, on_signal);
		signal(SIGTERM, on_signal);
		signal(SIGSEGV, on_signal);
		signal(SIGABRT, on_signal);
	}

	receiver_pid[i] = fork();
	if (receiver_pid[i] < 0)
		return false;
	if (receiver_pid[i] == 0)
	{
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		execl("/usr/bin/python3", "python3", path, "--port", "0",
			  "--port-file", port_file[i], (char *) NULL);
		_exit(127);
	}
	deadline = mono_ms() + 10000;
	while (mono_ms() < deadline)
	{
		FILE	   *f = fopen(port_file[i], "r");

		if (f)
		{
			int			ok = fscanf(f, "%d", out_port);

			fclose(f);
			if (ok == 1 && *out_port > 0)
				return true;
		}
		if (waitpid(receiver_pid[i], NULL, WNOHANG) == receiver_pid[i])
		{
			receiver_pid[i] = -1;
			return false;
		}
		usleep(20000);
	}
	return false;
}

/* A second receiver, for tests that need two origins. */
bool
harness_start_second(void)
{
	return receiver_pid[1] > 0 || start_receiver(1, &port2);
}

/* A loopback port with nothing listening: bind, read the port, close. */
int
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

JfHttpConfig
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

JfHttp *
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

char *
url(const char *host, const char *path)
{
	static char buf[8][512];
	static int	i;

	i = (i + 1) % 8;
	snprintf(buf[i], sizeof(buf[i]), "http://%s:%d%s", host, port, path);
	return buf[i];
}

bool
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
void
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

void
collected_free(Collected *c)
{
	for (int i = 0; i < c->n; i++)
		jf_http_result_free(&c->r[i]);
	c->n = 0;
}

JfHttpResult *
by_id(Collected *c, int64_t id)
{
	for (int i = 0; i < c->n; i++)
		if (c->r[i].task_id == id)
			return &c->r[i];
	return NULL;
}

char *
url_at(const char *host, int p, const char *path)
{
	static char buf[8][512];
	static int	i;

	i = (i + 1) % 8;
	snprintf(buf[i], sizeof(buf[i]), "http://%s:%d%s", host, p, path);
	return buf[i];
}

/* One request on a throwaway dispatcher; returns the body (caller frees). */
char *
fetch(const char *method, const char *path)
{
	return fetch_from(port, method, path);
}

/* The same, from the receiver listening on p. */
char *
fetch_from(int p, const char *method, const char *path)
{
	JfHttpConfig cfg = default_config();
	JfHttp	   *h;
	Collected  *c = calloc(1, sizeof(Collected));
	char	   *body = NULL;

	cfg.max_response_bytes = 16 * 1024 * 1024;
	h = make(&cfg);
	submit(h, 0, url_at("127.0.0.1", p, path), method, NULL, 0, NULL, 5000);
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

void
reset_receiver(void)
{
	free(fetch("POST", "/_reset"));
}

/* The receiver's JSON record of the request with this task id, or NULL. */
char *
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
int
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

/*
 * Only loopback here, and no proxy from the environment either; libcurl's
 * global state is set up once, as the worker does.
 */
bool
harness_start(void)
{
	char		err[256];

	unsetenv("http_proxy");
	unsetenv("https_proxy");
	unsetenv("HTTP_PROXY");
	unsetenv("HTTPS_PROXY");
	unsetenv("ALL_PROXY");
	unsetenv("all_proxy");
	if (!jf_http_global_init(err, sizeof(err)))
	{
		fprintf(stderr, "jf_http_global_init: %s\n", err);
		return false;
	}
	if (!start_receiver(0, &port))
	{
		fprintf(stderr, "could not start the receiver\n");
		return false;
	}
	return true;
}

/* The receiver is not left behind even if a test forgets to call this. */
void
harness_stop(void)
{
	kill_receiver();
	jf_http_global_cleanup();
}
