/*-------------------------------------------------------------------------
 *
 * http_harness.h
 *	  The receiver and the driving loop shared by the HTTP unit tests.
 *
 * harness_start() spawns test/receiver.py on a free loopback port
 * ($JOBFLOW_RECEIVER can point elsewhere; proxies from the environment are
 * dropped) and initialises libcurl; harness_stop() undoes both, and the
 * receiver is also killed at exit or on a fatal signal.  Dispatchers are
 * driven with a poll() loop on jf_http_fd() + jf_http_timeout_ms(), the
 * way the worker does it, and what the receiver saw is read back from its
 * GET /_requests list.  Loopback only.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_HTTP_HARNESS_H
#define JF_HTTP_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "http/http.h"

#define MAX_RESULTS 512

typedef struct Collected
{
	JfHttpResult r[MAX_RESULTS];
	int			n;
	int			max_in_flight;
} Collected;

/* the receiver's port, and the second receiver's (if started) */
extern int	port;
extern int	port2;

extern bool harness_start(void);
extern bool harness_start_second(void);
extern void harness_stop(void);

extern int64_t mono_ms(void);
extern int	closed_port(void);
extern JfHttpConfig default_config(void);
extern JfHttp *make(const JfHttpConfig *c);
extern char *url(const char *host, const char *path);
extern char *url_at(const char *host, int p, const char *path);
extern bool submit(JfHttp *h, int64_t id, const char *u, const char *method,
				   const char *const *headers, int nheaders,
				   const char *body, int timeout_ms);
extern void run_until(JfHttp *h, Collected *c, int want, int max_ms);
extern void collected_free(Collected *c);
extern JfHttpResult *by_id(Collected *c, int64_t id);
extern char *fetch(const char *method, const char *path);
extern char *fetch_from(int p, const char *method, const char *path);
extern void reset_receiver(void);
extern char *record_of(const char *json, int64_t id);
extern int	max_server_inflight(const char *json, const char *prefix);

#endif							/* JF_HTTP_HARNESS_H */
