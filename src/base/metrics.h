/*-------------------------------------------------------------------------
 *
 * metrics.h
 *	  The worker's histograms, counters and busiest origins in shared
 *	  memory (metrics.c), shown by jobflow.metrics() and jobflow.stats
 *	  (api/metrics.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_METRICS_H
#define JOBFLOW_METRICS_H

#include "port/atomics.h"

/*
 * Sizes the worker's modules define (checked where both are seen, in
 * worker/worker.c): the outcome classes (JF_NCLASS, http/http.h), and the
 * busiest origins and the longest origin (JF_FAIR_TOP, JF_FAIR_ORIGIN_MAX,
 * core/fair.h).
 */
#define JF_METRICS_CLASSES 12
#define JF_METRICS_TOP 10
#define JF_METRICS_ORIGIN_MAX 300

/* the circuits a worker publishes, at most (those not closed first) */
#define JF_METRICS_CIRCUITS 64

/* Bucket upper bounds, in milliseconds; one more bucket holds the rest. */
#define JF_HIST_BUCKETS 16

typedef enum JfHistId
{
	JF_HIST_LATENESS,			/* due -> request started */
	JF_HIST_CLAIM,				/* the claim statement */
	JF_HIST_FLUSH,				/* a flush of outcomes, its transaction */
	JF_HIST_TURN,				/* one turn of the loop, waiting excluded */
	JF_NHIST
} JfHistId;

typedef enum JfCounterId
{
	JF_COUNT_RESCANS,			/* housekeeping rescans of the table */
	JF_COUNT_CRON,				/* cron occurrences materialised as tasks */
	JF_COUNT_QUEUE_READS,		/* reads of jobflow.queues, whole or by key */
	JF_COUNT_QUEUE_ROWS,		/* rows of jobflow.queues they read */
	JF_COUNT_ROLE_CHECKS,		/* looks at pg_authid after it changed */
	JF_COUNT_ROLE_SWEEPS,		/* sweeps for roles that no longer exist */
	JF_COUNT_NOTIFY_SKIPPED,	/* jobflow_outcome notifications not sent */
	JF_COUNT_STALE_CONNECTIONS, /* requests started again: their pooled
								 * connection was closed by its server */
	JF_COUNT_CRON_SKIPPED,		/* cron occurrences cancelled by their
								 * timer's overlap policy */
	JF_NCOUNT
} JfCounterId;

typedef struct JfHistShared
{
	pg_atomic_uint64 bucket[JF_HIST_BUCKETS + 1];	/* not cumulative */
	pg_atomic_uint64 sum_us;
} JfHistShared;

/* One of the busiest origins, as last published by the worker. */
typedef struct JfHostShared
{
	char		origin[JF_METRICS_ORIGIN_MAX];
	int32		in_flight;
	int32		queued;
} JfHostShared;

/* One circuit of (owner, origin), as last published by the worker. */
typedef struct JfCircuitShared
{
	char		origin[JF_METRICS_ORIGIN_MAX];
	Oid			owner;
	int32		state;			/* JfCircuitState (core/circuit.h) */
	int32		failures;
	int64		since_ms;		/* unix ms */
	int64		next_probe_ms;	/* unix ms; 0: none planned */
	int64		held;			/* due tasks parked behind it */
} JfCircuitShared;

/* A reset asked by jobflow.reset_circuit(), for the worker (JfSlot). */
#define JF_CIRCUIT_RESETS 16
typedef struct JfCircuitReset
{
	Oid			owner;			/* InvalidOid: every owner's */
	char		origin[JF_METRICS_ORIGIN_MAX];
} JfCircuitReset;

typedef struct JfMetricsShared
{
	JfHistShared hist[JF_NHIST];
	pg_atomic_uint64 outcomes[JF_METRICS_CLASSES];	/* by JfHttpClass */
	pg_atomic_uint64 counters[JF_NCOUNT];

	/*
	 * The busiest origins, rewritten by the worker at most once a second;
	 * odd while it writes (readers copy and retry, as with PgBackendStatus'
	 * st_changecount).
	 */
	pg_atomic_uint32 hosts_changecount;
	int			nhosts;
	JfHostShared hosts[JF_METRICS_TOP];

	/*
	 * The circuits that count failures or are open, rewritten when one
	 * changes state and at most once a second while any is not closed;
	 * the same change count protocol.  circuits_open counts all of the
	 * worker's open circuits, those beyond the array too.
	 */
	pg_atomic_uint32 circuits_changecount;
	int			ncircuits;
	int			circuits_open;
	JfCircuitShared circuits[JF_METRICS_CIRCUITS];
} JfMetricsShared;

extern void jf_metrics_shmem_init(JfMetricsShared *m);
extern void jf_metrics_reset(JfMetricsShared *m);

/* histogram bounds, in milliseconds (the last bucket holds the rest) */
extern const double jf_metrics_bucket_ms[JF_HIST_BUCKETS];

/* the worker's writers, into the figures it attached to */
extern void jf_metrics_attach(JfMetricsShared *m);
extern void jf_metrics_observe(JfHistId h, int64 us);
extern void jf_metrics_outcome(int class);
extern void jf_metrics_count(JfCounterId c, uint64 n);

#endif							/* JOBFLOW_METRICS_H */
