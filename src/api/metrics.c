/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  What a DBA scrapes: the worker's figures (base/metrics.c) shown as
 *	  Prometheus text by jobflow.metrics() and as rows by jobflow._stats()
 *	  (the jobflow.stats view).
 *
 * Times are shown in seconds, as Prometheus wants.  A reader may see one
 * observation counted in a bucket and not yet in the sum: the figures are
 * monotonic counters, and a scrape a moment later is right again.  No
 * figure names a task, a URL or an owner: jobflow_monitor reads all of
 * this and no task contents.  The busiest origins are labelled with their
 * origin alone (scheme://host:port), as the worker published them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/tuplestore.h"

#include "base/compat.h"
#include "api/metrics.h"
#include "base/metrics.h"
#include "http/http.h"
#include "launcher/slots.h"

static const char *const hist_name[JF_NHIST] = {
	"jobflow_lateness_seconds",
	"jobflow_claim_duration_seconds",
	"jobflow_flush_duration_seconds",
	"jobflow_loop_turn_seconds"
};

static const char *const hist_help[JF_NHIST] = {
	"Time from a task's due time to the start of its request.",
	"Time the claim statement of a batch of due tasks took.",
	"Time a flush of outcomes to jobflow.tasks and jobflow.task_log took, commit included.",
	"Time one turn of the worker's loop took, waiting excluded."
};

/* A consistent copy of the published origins; retries while one is written. */
static int
read_hosts(JfMetricsShared *m, JfHostShared *out)
{
	for (;;)
	{
		uint32		before = pg_atomic_read_u32(&m->hosts_changecount);
		int			n;
		int			i;

		pg_read_barrier();
		n = Min(Max(m->nhosts, 0), JF_METRICS_TOP);
		memcpy(out, m->hosts, sizeof(JfHostShared) * n);
		pg_read_barrier();
		if ((before & 1) == 0 && before == pg_atomic_read_u32(&m->hosts_changecount))
		{
			for (i = 0; i < n; i++)
				out[i].origin[sizeof(out[i].origin) - 1] = '\0';
			return n;
		}
		CHECK_FOR_INTERRUPTS();
	}
}

/* host="origin", escaped as the Prometheus text format wants. */
static void
host_label(StringInfo buf, const char *origin)
{
	const char *p;

	resetStringInfo(buf);
	appendStringInfoString(buf, "host=\"");
	for (p = origin; *p; p++)
	{
		if (*p == '\\' || *p == '"')
			appendStringInfoChar(buf, '\\');
		if (*p == '\n')
			appendStringInfoString(buf, "\\n");
		else
			appendStringInfoChar(buf, *p);
	}
	appendStringInfoChar(buf, '"');
}

/*
 * Where the figures go: Prometheus text (text != NULL) or rows of
 * (metric, labels, value, description) for jobflow.stats.
 */
typedef struct Emitter
{
	StringInfo	text;
	Tuplestorestate *rows;
	TupleDesc	desc;
	JfSlot	   *slot;		/* this database's worker's figures */
} Emitter;

static void
family(Emitter *em, const char *name, const char *type, const char *help)
{
	if (em->text)
		appendStringInfo(em->text, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
sample(Emitter *em, const char *name, const char *labels, double value,
	   const char *help)
{
	if (em->text)
	{
		appendStringInfoString(em->text, name);
		if (labels)
			appendStringInfo(em->text, "{%s}", labels);
		if (value == (double) (int64) value)
			appendStringInfo(em->text, " %lld\n", (long long) value);
		else
			appendStringInfo(em->text, " %.9g\n", value);
	}
	else
	{
		Datum		values[4];
		bool		nulls[4] = {false, labels == NULL, false, false};

		/* the view names figures without the common prefix */
		values[0] = CStringGetTextDatum(strncmp(name, "jobflow_", 8) == 0 ? name + 8 : name);
		values[1] = labels ? CStringGetTextDatum(labels) : (Datum) 0;
		values[2] = Float8GetDatum(value);
		values[3] = CStringGetTextDatum(help);
		tuplestore_putvalues(em->rows, em->desc, values, nulls);
	}
}

static void
counter(Emitter *em, const char *name, uint64 value, const char *help)
{
	family(em, name, "counter", help);
	sample(em, name, NULL, (double) value, help);
}

static void
gauge(Emitter *em, const char *name, double value, const char *help)
{
	family(em, name, "gauge", help);
	sample(em, name, NULL, value, help);
}

/*
 * A histogram: cumulative buckets, sum and count in the text; count, sum
 * and the p50/p99 bucket bounds (an upper estimate) in the rows.
 */
static void
histogram(Emitter *em, JfHistId h)
{
	JfHistShared *hs = &em->slot->metrics.hist[h];
	uint64		counts[JF_HIST_BUCKETS + 1];
	uint64		total = 0;
	double		sum = (double) pg_atomic_read_u64(&hs->sum_us) / 1e6;
	char		name[128];
	char		labels[64];
	int			i;

	for (i = 0; i <= JF_HIST_BUCKETS; i++)
	{
		counts[i] = pg_atomic_read_u64(&hs->bucket[i]);
		total += counts[i];
	}
	if (em->text)
	{
		uint64		cumulative = 0;

		family(em, hist_name[h], "histogram", hist_help[h]);
		snprintf(name, sizeof(name), "%s_bucket", hist_name[h]);
		for (i = 0; i <= JF_HIST_BUCKETS; i++)
		{
			cumulative += counts[i];
			/* whole bounds as Prometheus' clients write them: "5.0" */
			if (i < JF_HIST_BUCKETS && jf_metrics_bucket_ms[i] >= 1000)
				snprintf(labels, sizeof(labels), "le=\"%.1f\"", jf_metrics_bucket_ms[i] / 1000.0);
			else if (i < JF_HIST_BUCKETS)
				snprintf(labels, sizeof(labels), "le=\"%g\"", jf_metrics_bucket_ms[i] / 1000.0);
			else
				snprintf(labels, sizeof(labels), "le=\"+Inf\"");
			sample(em, name, labels, (double) cumulative, hist_help[h]);
		}
	}
	else
	{
		static const double quantiles[2] = {0.5, 0.99};
		int			q;

		for (q = 0; q < 2; q++)
		{
			uint64		cumulative = 0;
			double		bound = 0;

			for (i = 0; i <= JF_HIST_BUCKETS && total > 0; i++)
			{
				cumulative += counts[i];
				if ((double) cumulative >= quantiles[q] * (double) total)
				{
					bound = i < JF_HIST_BUCKETS ? jf_metrics_bucket_ms[i] / 1000.0 : get_float8_infinity();
					break;
				}
			}
			snprintf(name, sizeof(name), "%s_p%d", hist_name[h], q == 0 ? 50 : 99);
			sample(em, name, NULL, bound,
				   "Upper bound of the histogram bucket holding this quantile (0 before any observation).");
		}
	}
	snprintf(name, sizeof(name), "%s_sum", hist_name[h]);
	sample(em, name, NULL, sum, hist_help[h]);
	snprintf(name, sizeof(name), "%s_count", hist_name[h]);
	sample(em, name, NULL, (double) total, hist_help[h]);
}

/* Busiest first; equal loads by origin, so that the order is stable. */
static int
compare_host_load(const void *a, const void *b)
{
	const JfHostShared *x = a;
	const JfHostShared *y = b;
	int64		dx = (int64) x->in_flight + x->queued;
	int64		dy = (int64) y->in_flight + y->queued;

	if (dx != dy)
		return dx > dy ? -1 : 1;
	return strcmp(x->origin, y->origin);
}

/*
 * The busiest origins of the database: each running worker's ten, an
 * origin's figures added up over the workers that send to it, the ten
 * busiest of those.
 */
int
jf_busiest_origins(JfHostShared *out)
{
	JfSlot	   *slots[JF_MAX_WORKERS_PER_DB];
	JfHostShared *all = palloc(sizeof(JfHostShared) * JF_METRICS_TOP * JF_MAX_WORKERS_PER_DB);
	int			n = 0;
	int			part;
	int			i;
	int			j;

	(void) jf_db_slots(MyDatabaseId, slots);
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JfSlot	   *s = slots[part];
		JfHostShared got[JF_METRICS_TOP];
		pid_t		pid;
		int			k;

		if (s == NULL)
			continue;
		SpinLockAcquire(&s->mutex);
		pid = s->dboid == MyDatabaseId ? s->worker_pid : 0;
		SpinLockRelease(&s->mutex);
		if (pid == 0)
			continue;			/* what it published is gone with it */
		k = read_hosts(&s->metrics, got);
		/* given to another database while it was read: none of ours */
		SpinLockAcquire(&s->mutex);
		if (s->dboid != MyDatabaseId || s->worker_pid != pid)
			k = 0;
		SpinLockRelease(&s->mutex);
		for (i = 0; i < k; i++)
		{
			for (j = 0; j < n; j++)
				if (strcmp(all[j].origin, got[i].origin) == 0)
					break;
			if (j < n)
			{
				all[j].in_flight += got[i].in_flight;
				all[j].queued += got[i].queued;
			}
			else
				all[n++] = got[i];
		}
	}
	qsort(all, n, sizeof(JfHostShared), compare_host_load);
	n = Min(n, JF_METRICS_TOP);
	memcpy(out, all, sizeof(JfHostShared) * n);
	pfree(all);
	return n;
}

/*
 * Requests in flight and queued for each of the busiest origins (none
 * while no worker runs: what was published is gone with it).
 */
static void
busiest_hosts(Emitter *em)
{
	static const char *const help_in_flight =
		"HTTP requests being sent or awaiting their answer, for each of the busiest origins (at most 10, by requests in flight and queued; updated once a second).";
	static const char *const help_queued =
		"Due tasks waiting for a place under the concurrency caps, for each of the busiest origins (at most 10, by requests in flight and queued; updated once a second).";
	JfHostShared hosts[JF_METRICS_TOP];
	StringInfoData label;
	int			n = jf_busiest_origins(hosts);
	int			i;

	initStringInfo(&label);
	family(em, "jobflow_host_requests_in_flight", "gauge", help_in_flight);
	for (i = 0; i < n; i++)
	{
		host_label(&label, hosts[i].origin);
		sample(em, "jobflow_host_requests_in_flight", label.data, hosts[i].in_flight,
			   help_in_flight);
	}
	family(em, "jobflow_host_requests_queued", "gauge", help_queued);
	for (i = 0; i < n; i++)
	{
		host_label(&label, hosts[i].origin);
		sample(em, "jobflow_host_requests_queued", label.data, hosts[i].queued, help_queued);
	}
	pfree(label.data);
}

/*
 * Why the first worker claims nothing: 1 for the reason it holds, 0 for
 * the others, as an enum is shown to Prometheus.
 */
static void
worker_held(Emitter *em)
{
	static const char *const help =
		"1 while the worker claims nothing, by reason: jobflow.dispatch off, a subscription of jobflow's tables, a restore, a sequence behind its table.";
	uint64		held = pg_atomic_read_u64(&em->slot->held);
	char		label[64];
	int			r;

	family(em, "jobflow_worker_held", "gauge", help);
	for (r = JF_HELD_NO + 1; r < JF_HELD_REASONS; r++)
	{
		snprintf(label, sizeof(label), "reason=\"%s\"", jf_held_names[r]);
		sample(em, "jobflow_worker_held", label, held == (uint64) r ? 1 : 0, help);
	}
}

/* Every figure, in one order for both forms. */
static void
emit_all(Emitter *em)
{
	JfSlot	   *s = em->slot;
	JfMetricsShared *m = &s->metrics;
	int			up;
	int			i;
	int			h;

	up = jf_workers_up();
	gauge(em, "jobflow_worker_up", up == jobflow_workers_per_database ? 1 : 0,
		  "1 when every jobflow worker of the database runs.");
	gauge(em, "jobflow_workers_up", up,
		  "jobflow workers of the database running (of jobflow.workers_per_database).");
	gauge(em, "jobflow_requests_in_flight", (double) jf_gauge_sum(offsetof(JfSlot, in_flight)),
		  "HTTP requests being sent or awaiting their answer.");
	gauge(em, "jobflow_requests_queued", (double) jf_gauge_sum(offsetof(JfSlot, queued)),
		  "Due tasks waiting for a place under the concurrency caps.");
	worker_held(em);
	busiest_hosts(em);
	gauge(em, "jobflow_wheel_tasks", (double) jf_gauge_sum(offsetof(JfSlot, wheel_tasks)),
		  "Pending tasks held in the worker's time wheel.");
	gauge(em, "jobflow_buffered_outcomes", (double) jf_gauge_sum(offsetof(JfSlot, buffered_rows)),
		  "Outcomes waiting to be written.");
	for (h = 0; h < JF_NHIST; h++)
		histogram(em, h);

	family(em, "jobflow_outcomes_total", "counter",
		   "Finished requests by class: HTTP status class, or what prevented an answer.");
	for (i = 0; i < JF_METRICS_CLASSES; i++)
	{
		char		labels[32];

		snprintf(labels, sizeof(labels), "class=\"%s\"", jf_http_class_name(i));
		sample(em, "jobflow_outcomes_total", labels,
			   (double) pg_atomic_read_u64(&m->outcomes[i]),
			   "Finished requests by class: HTTP status class, or what prevented an answer.");
	}
	counter(em, "jobflow_fired_total", pg_atomic_read_u64(&s->fired),
			"Attempts claimed and sent.");
	counter(em, "jobflow_succeeded_total", pg_atomic_read_u64(&s->succeeded),
			"Tasks that succeeded.");
	counter(em, "jobflow_failed_total", pg_atomic_read_u64(&s->failed),
			"Tasks that failed for good.");
	counter(em, "jobflow_retries_total", pg_atomic_read_u64(&s->retried),
			"Failed attempts scheduled to be retried.");
	counter(em, "jobflow_flushes_total", pg_atomic_read_u64(&s->flushes),
			"Transactions writing outcomes.");
	counter(em, "jobflow_statements_total", pg_atomic_read_u64(&s->statements),
			"SQL statements the worker ran.");
	counter(em, "jobflow_rescans_total", pg_atomic_read_u64(&m->counters[JF_COUNT_RESCANS]),
			"Housekeeping rescans of jobflow.tasks.");
	counter(em, "jobflow_wakeups_total", pg_atomic_read_u64(&s->wake_ranges),
			"Wake-ups published at commit by transactions that wrote tasks.");
	counter(em, "jobflow_cron_materialised_total",
			pg_atomic_read_u64(&m->counters[JF_COUNT_CRON]),
			"Cron occurrences turned into tasks.");
	counter(em, "jobflow_queue_reads_total",
			pg_atomic_read_u64(&m->counters[JF_COUNT_QUEUE_READS]),
			"Reads of jobflow.queues after commits that changed it, whole or by the queues changed.");
	counter(em, "jobflow_queue_rows_read_total",
			pg_atomic_read_u64(&m->counters[JF_COUNT_QUEUE_ROWS]),
			"Rows of jobflow.queues those reads returned.");
	counter(em, "jobflow_role_checks_total",
			pg_atomic_read_u64(&m->counters[JF_COUNT_ROLE_CHECKS]),
			"Looks at the cluster's roles after they changed, at most one per jobflow.reconcile_interval.");
	counter(em, "jobflow_role_sweeps_total",
			pg_atomic_read_u64(&m->counters[JF_COUNT_ROLE_SWEEPS]),
			"Sweeps of jobflow's tables for what roles that no longer exist left.");
	counter(em, "jobflow_outcome_notifications_skipped_total",
			pg_atomic_read_u64(&m->counters[JF_COUNT_NOTIFY_SKIPPED]),
			"Outcome notifications not sent because the server's notification queue was more than half full.");
	counter(em, "jobflow_stale_connections_total",
			pg_atomic_read_u64(&m->counters[JF_COUNT_STALE_CONNECTIONS]),
			"Requests started again on another connection, before anything was sent, because the server had closed their pooled one while it was idle.");
	counter(em, "jobflow_pruned_tasks_total", pg_atomic_read_u64(&s->pruned_tasks),
			"Finished tasks removed by the worker under jobflow.retention.");
	counter(em, "jobflow_pruned_log_rows_total", pg_atomic_read_u64(&s->pruned_log_rows),
			"Log rows removed with them.");
}

/*
 * jobflow.metrics() RETURNS text: the Prometheus text exposition format
 * (version 0.0.4), for an exporter or a scrape through any SQL client.
 */
PG_FUNCTION_INFO_V1(jobflow_metrics);
Datum
jobflow_metrics(PG_FUNCTION_ARGS)
{
	Emitter		em = {0};

	em.slot = jf_reader_slot();

	em.text = makeStringInfo();
	emit_all(&em);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(em.text->data, em.text->len));
}

/*
 * jobflow._stats() RETURNS TABLE (metric, labels, value, description):
 * the same figures as rows, behind the jobflow.stats view.
 */
PG_FUNCTION_INFO_V1(jobflow_stats);
Datum
jobflow_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Emitter		em = {0};

	em.slot = jf_reader_slot();

	jf_init_materialized_srf(fcinfo);
	em.rows = rsinfo->setResult;
	em.desc = rsinfo->setDesc;
	emit_all(&em);
	return (Datum) 0;
}
