/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  The worker's histograms and counters, kept in shared memory in its
 *	  database's first slot; api/metrics.c shows them.
 *
 * The worker alone writes (one atomic add per observation, no lock); any
 * backend reads.  A reader may see one observation counted in a bucket
 * and not yet in the sum: the figures are monotonic counters, and a
 * scrape a moment later is right again.  The count of a histogram is the
 * sum of its buckets, so the +Inf bucket and _count always agree.
 *
 * Times are observed in microseconds and shown in seconds, as Prometheus
 * wants; buckets are fixed (1 ms to 5 min) so that every scrape of every
 * server can be aggregated.  No figure names a task, a URL or an owner:
 * jobflow_monitor reads all of this and no task contents.  The busiest
 * origins are labelled with their origin alone (scheme://host:port, no
 * path, query or credentials), published by the worker at most once a
 * second from its fair share's small table of them (fair.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "port/atomics.h"

#include "base/metrics.h"

/* where this process's observations go: set by the worker (jf_metrics_attach) */
static JfMetricsShared *figures = NULL;

const double jf_metrics_bucket_ms[JF_HIST_BUCKETS] = {
	1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000
};

/* Zero every figure; at shared memory creation. */
void
jf_metrics_shmem_init(JfMetricsShared *m)
{
	int			h;
	int			i;

	for (h = 0; h < JF_NHIST; h++)
	{
		for (i = 0; i <= JF_HIST_BUCKETS; i++)
			pg_atomic_init_u64(&m->hist[h].bucket[i], 0);
		pg_atomic_init_u64(&m->hist[h].sum_us, 0);
	}
	for (i = 0; i < JF_METRICS_CLASSES; i++)
		pg_atomic_init_u64(&m->outcomes[i], 0);
	for (i = 0; i < JF_NCOUNT; i++)
		pg_atomic_init_u64(&m->counters[i], 0);
	pg_atomic_init_u32(&m->hosts_changecount, 0);
	m->nhosts = 0;
	pg_atomic_init_u32(&m->circuits_changecount, 0);
	m->ncircuits = 0;
	m->circuits_open = 0;
}

/* Zero every figure of a slot taken by another database (writes only). */
void
jf_metrics_reset(JfMetricsShared *m)
{
	int			h;
	int			i;

	for (h = 0; h < JF_NHIST; h++)
	{
		for (i = 0; i <= JF_HIST_BUCKETS; i++)
			pg_atomic_write_u64(&m->hist[h].bucket[i], 0);
		pg_atomic_write_u64(&m->hist[h].sum_us, 0);
	}
	for (i = 0; i < JF_METRICS_CLASSES; i++)
		pg_atomic_write_u64(&m->outcomes[i], 0);
	for (i = 0; i < JF_NCOUNT; i++)
		pg_atomic_write_u64(&m->counters[i], 0);
	/* the busiest origins of the database the slot served before go too */
	pg_atomic_fetch_add_u32(&m->hosts_changecount, 1);
	m->nhosts = 0;
	pg_write_barrier();
	pg_atomic_fetch_add_u32(&m->hosts_changecount, 1);
	/* and its circuits */
	pg_atomic_fetch_add_u32(&m->circuits_changecount, 1);
	m->ncircuits = 0;
	m->circuits_open = 0;
	pg_write_barrier();
	pg_atomic_fetch_add_u32(&m->circuits_changecount, 1);
}

/* One observation of a histogram, in microseconds (negative counts as 0). */
void
jf_metrics_observe(JfHistId h, int64 us)
{
	JfHistShared *hs = &figures->hist[h];
	int			i = 0;

	if (us < 0)
		us = 0;
	while (i < JF_HIST_BUCKETS && (double) us > jf_metrics_bucket_ms[i] * 1000.0)
		i++;
	pg_atomic_fetch_add_u64(&hs->bucket[i], 1);
	pg_atomic_fetch_add_u64(&hs->sum_us, (uint64) us);
}

/* A finished request, counted in its class (JfHttpClass, http/http.h). */
void
jf_metrics_outcome(int class)
{
	if (class >= 0 && class < JF_METRICS_CLASSES)
		pg_atomic_fetch_add_u64(&figures->outcomes[class], 1);
}

void
jf_metrics_count(JfCounterId c, uint64 n)
{
	pg_atomic_fetch_add_u64(&figures->counters[c], n);
}

/*
 * The worker: its observations go to these figures (its database's first
 * worker's slot, which every worker of the database shares).
 */
void
jf_metrics_attach(JfMetricsShared *m)
{
	figures = m;
}
