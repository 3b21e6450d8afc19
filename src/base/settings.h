/*-------------------------------------------------------------------------
 *
 * settings.h
 *	  The variables of jobflow's settings (settings.c defines them all),
 *	  and the names every part of jobflow agrees on.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_SETTINGS_H
#define JOBFLOW_SETTINGS_H

#include "postgres.h"

/* the library's version: the schema it needs (see worker/schema_version.c) */
#define JOBFLOW_VERSION "0.3.0"
/* the channel that wakes the workers (LISTEN jobflow, NOTIFY jobflow) */
#define JOBFLOW_CHANNEL "jobflow"

extern char *jobflow_database_name;	/* deprecated, ignored */
extern int	jobflow_max_databases;
extern int	jobflow_workers_per_database;
extern int	jobflow_horizon_s;
extern int	jobflow_max_body_size;
extern int	jobflow_max_headers_size;
extern int	jobflow_max_concurrent;
extern int	jobflow_max_per_host;
extern int	jobflow_max_per_owner;
extern double jobflow_max_rate_per_host;	/* requests/s, 0: no limit */

/* the range of dispatch rates, per host or per queue (requests a second) */
#define JF_MIN_RATE 0.001
#define JF_MAX_RATE 1000000.0
extern int	jobflow_max_response_size;
extern int	jobflow_max_redirects;
extern int	jobflow_log_batch_size;
extern int	jobflow_log_flush_ms;
extern int	jobflow_claim_batch_size;
extern int	jobflow_retry_base_ms;
extern int	jobflow_retry_max_ms;
extern int	jobflow_circuit_failures;	/* 0: no circuits */
extern int	jobflow_circuit_window_s;
extern int	jobflow_circuit_probe_min_s;
extern int	jobflow_circuit_probe_max_s;
extern int	jobflow_reconcile_ms;
extern int	jobflow_shutdown_grace_ms;
extern char *jobflow_deny_networks;
extern char *jobflow_tls_ca_file;
extern char *jobflow_tls_ca_path;
extern char *jobflow_allow_networks;
extern bool jobflow_follow_cross_origin_redirects;
extern int	jobflow_retention_s;
extern int	jobflow_prune_batch_size;
extern int	jobflow_max_queues_per_role;	/* 0: no limit */
extern int	jobflow_max_timers_per_role;	/* 0: no limit */
/* jobflow.dispatch: off holds every worker; auto, the workers of subscribers */
typedef enum JfDispatchMode
{
	JF_DISPATCH_AUTO,
	JF_DISPATCH_ON,
	JF_DISPATCH_OFF
} JfDispatchMode;
extern int	jobflow_dispatch;

/*
 * jobflow.log_attempts: every attempt in jobflow.task_log, or failures
 * only (a success at a task's first attempt writes no row); a queue's
 * jobflow.queues.log_attempts overrides it.
 */
typedef enum JfLogAttempts
{
	JF_LOG_ATTEMPTS_ALL,
	JF_LOG_ATTEMPTS_FAILURES
} JfLogAttempts;
extern int	jobflow_log_attempts;

/* most workers per database (jobflow.workers_per_database) */
#define JF_MAX_WORKERS_PER_DB 8

/* _PG_init: define every setting */
extern void jf_settings_define(void);

/*
 * jobflow_max_per_host, jobflow_log_flush_ms, jobflow_retry_base_ms and
 * jobflow_reconcile_ms hold the values in effect, bounded by the rules
 * between settings; this warns about each value so bounded (the worker,
 * after it reads the configuration).
 */
extern void jf_settings_report_rules(void);

#endif							/* JOBFLOW_SETTINGS_H */
