/*-------------------------------------------------------------------------
 *
 * metrics.h
 *	  The worker's histograms and counters in shared memory (metrics.c),
 *	  shown by jobflow.metrics() and the jobflow.stats view.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_METRICS_H
#define JOBFLOW_METRICS_H

#include "port/atomics.h"

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

typedef enum JfOutcomeClass
{
	JF_CLASS_2XX,
	JF_CLASS_3XX,
	JF_CLASS_4XX,
	JF_CLASS_5XX,
	JF_CLASS_TIMEOUT,
	JF_CLASS_CONNECT,			/* DNS failure, refused, unreachable */
	JF_CLASS_DENIED,			/* refused before sending: a denied address
								 * or an invalid request */
	JF_CLASS_NO_ANSWER,
	JF_CLASS_REDIRECT,			/* a redirect not followed */
	JF_CLASS_OTHER,				/* TLS, protocol, reset... */
	JF_NCLASS
} JfOutcomeClass;

typedef enum JfCounterId
{
	JF_COUNT_RESCANS,			/* housekeeping rescans of the table */
	JF_COUNT_CRON,				/* cron occurrences materialised as tasks */
	JF_NCOUNT
} JfCounterId;

typedef struct JfHistShared
{
	pg_atomic_uint64 bucket[JF_HIST_BUCKETS + 1];	/* not cumulative */
	pg_atomic_uint64 sum_us;
} JfHistShared;

typedef struct JfMetricsShared
{
	JfHistShared hist[JF_NHIST];
	pg_atomic_uint64 outcomes[JF_NCLASS];
	pg_atomic_uint64 counters[JF_NCOUNT];
} JfMetricsShared;

extern void jf_metrics_shmem_init(JfMetricsShared *m);
extern void jf_metrics_reset(JfMetricsShared *m);

/* the worker's writers */
extern void jf_metrics_observe(JfHistId h, int64 us);
extern void jf_metrics_outcome(int error_kind, int http_status);
extern void jf_metrics_count(JfCounterId c, uint64 n);

#endif							/* JOBFLOW_METRICS_H */
