/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  What a DBA scrapes: the worker's figures (base/metrics.c) shown as
 *	  Prometheus text by jobflow.metrics() and as rows by jobflow._figures()
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

#include "executor/spi.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "base/compat.h"
#include "api/as_owner.h"
#include "api/circuits.h"
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

/* One label of a sample: its name and its value, unescaped. */
typedef struct Label
{
	const char *name;
	const char *value;
} Label;

/* name="value",... escaped as the Prometheus text format wants. */
static void
format_labels(StringInfo buf, const Label *labels, int n)
{
	int			i;
	const char *p;

	for (i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoChar(buf, ',');
		appendStringInfo(buf, "%s=\"", labels[i].name);
		for (p = labels[i].value; *p; p++)
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
}

/* The labels as a JSON object, for jobflow.stats' label_set. */
static Datum
labels_jsonb(const Label *labels, int n)
{
	StringInfoData buf;
	int			i;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, labels[i].name);
		appendStringInfoString(&buf, ": ");
		escape_json(&buf, labels[i].value);
	}
	appendStringInfoChar(&buf, '}');
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
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
sample(Emitter *em, const char *name, const Label *labels, int nlabels,
	   double value, const char *help)
{
	StringInfoData formatted;

	initStringInfo(&formatted);
	format_labels(&formatted, labels, nlabels);
	if (em->text)
	{
		appendStringInfoString(em->text, name);
		if (nlabels > 0)
			appendStringInfo(em->text, "{%s}", formatted.data);
		if (value == (double) (int64) value)
			appendStringInfo(em->text, " %lld\n", (long long) value);
		else
			appendStringInfo(em->text, " %.15g\n", value);
	}
	else
	{
		Datum		values[5];
		bool		nulls[5] = {false, nlabels == 0, false, false, false};

		/* the view names figures without the common prefix */
		values[0] = CStringGetTextDatum(strncmp(name, "jobflow_", 8) == 0 ? name + 8 : name);
		values[1] = nlabels > 0 ? CStringGetTextDatum(formatted.data) : (Datum) 0;
		values[2] = Float8GetDatum(value);
		values[3] = CStringGetTextDatum(help);
		/* 0.3.0's column (a 0.2.0 schema's view has four) */
		if (em->desc->natts > 4)
			values[4] = labels_jsonb(labels, nlabels);
		tuplestore_putvalues(em->rows, em->desc, values, nulls);
	}
	pfree(formatted.data);
}

/* A sample with one label. */
static void
sample1(Emitter *em, const char *name, const char *label, const char *value,
		double v, const char *help)
{
	Label		l = {label, value};

	sample(em, name, &l, 1, v, help);
}

static void
counter(Emitter *em, const char *name, uint64 value, const char *help)
{
	family(em, name, "counter", help);
	sample(em, name, NULL, 0, (double) value, help);
}

static void
gauge(Emitter *em, const char *name, double value, const char *help)
{
	family(em, name, "gauge", help);
	sample(em, name, NULL, 0, value, help);
}

/*
 * A histogram: cumulative buckets, sum and count in both forms; in the
 * rows also the p50/p99 bucket bounds (an upper estimate), for psql.
 */
static void
histogram(Emitter *em, JfHistId h)
{
	JfHistShared *hs = &em->slot->metrics.hist[h];
	uint64		counts[JF_HIST_BUCKETS + 1];
	uint64		total = 0;
	uint64		cumulative = 0;
	double		sum = (double) pg_atomic_read_u64(&hs->sum_us) / 1e6;
	char		name[128];
	char		le[32];
	int			i;

	for (i = 0; i <= JF_HIST_BUCKETS; i++)
	{
		counts[i] = pg_atomic_read_u64(&hs->bucket[i]);
		total += counts[i];
	}
	family(em, hist_name[h], "histogram", hist_help[h]);
	snprintf(name, sizeof(name), "%s_bucket", hist_name[h]);
	for (i = 0; i <= JF_HIST_BUCKETS; i++)
	{
		cumulative += counts[i];
		/* whole bounds as Prometheus' clients write them: "5.0" */
		if (i < JF_HIST_BUCKETS && jf_metrics_bucket_ms[i] >= 1000)
			snprintf(le, sizeof(le), "%.1f", jf_metrics_bucket_ms[i] / 1000.0);
		else if (i < JF_HIST_BUCKETS)
			snprintf(le, sizeof(le), "%g", jf_metrics_bucket_ms[i] / 1000.0);
		else
			snprintf(le, sizeof(le), "+Inf");
		sample1(em, name, "le", le, (double) cumulative, hist_help[h]);
	}
	if (!em->text)
	{
		static const double quantiles[2] = {0.5, 0.99};
		int			q;

		for (q = 0; q < 2; q++)
		{
			double		bound = 0;

			cumulative = 0;
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
			sample(em, name, NULL, 0, bound,
				   "Upper bound of the histogram bucket holding this quantile (0 before any observation).");
		}
	}
	snprintf(name, sizeof(name), "%s_sum", hist_name[h]);
	sample(em, name, NULL, 0, sum, hist_help[h]);
	snprintf(name, sizeof(name), "%s_count", hist_name[h]);
	sample(em, name, NULL, 0, (double) total, hist_help[h]);
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
	int			n = jf_busiest_origins(hosts);
	int			i;

	family(em, "jobflow_host_requests_in_flight", "gauge", help_in_flight);
	for (i = 0; i < n; i++)
	{
		sample1(em, "jobflow_host_requests_in_flight", "origin", hosts[i].origin,
				hosts[i].in_flight, help_in_flight);
	}
	family(em, "jobflow_host_requests_queued", "gauge", help_queued);
	for (i = 0; i < n; i++)
	{
		sample1(em, "jobflow_host_requests_queued", "origin", hosts[i].origin,
				hosts[i].queued, help_queued);
	}
}

/*
 * Why the first worker claims nothing: 1 for the reason it holds, 0 for
 * the others, as an enum is shown to Prometheus.
 */
static void
worker_held(Emitter *em)
{
	static const char *const help =
		"1 while the worker claims nothing, by reason: jobflow.dispatch off, a subscription of jobflow's tables, a restore, a sequence behind its table, a wait for ALTER EXTENSION jobflow UPDATE.";
	uint64		held = pg_atomic_read_u64(&em->slot->held);
	int			r;

	family(em, "jobflow_worker_held", "gauge", help);
	for (r = JF_HELD_NO + 1; r < JF_HELD_REASONS; r++)
	{
		sample1(em, "jobflow_worker_held", "reason", jf_held_names[r],
				held == (uint64) r ? 1 : 0, help);
	}
}

/* Unix seconds of a unix-milliseconds figure. */
static double
unix_seconds(uint64 ms)
{
	return (double) ms / 1000.0;
}

/* The current time in unix milliseconds, as the workers write theirs. */
static uint64
unix_now_ms(void)
{
	TimestampTz now = GetCurrentTimestamp();

	return (uint64) (now / 1000 +
					 (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000);
}

/*
 * When each running worker of the database last turned its loop: a worker
 * that is up but stuck (a statement that never ends, a lock it waits for)
 * stops moving this, which jobflow_worker_up cannot show.  Workers turn at
 * least every jobflow.reconcile_interval, even idle or held.
 */
static void
worker_turns(Emitter *em)
{
	static const char *const help =
		"Unix time of the last turn of each running worker's loop (it turns at least every jobflow.reconcile_interval).";
	JfSlot	   *slots[JF_MAX_WORKERS_PER_DB];
	int			part;

	(void) jf_db_slots(MyDatabaseId, slots);
	family(em, "jobflow_worker_last_turn_timestamp_seconds", "gauge", help);
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JfSlot	   *s = slots[part];
		pid_t		pid;
		uint64		turn;
		char		worker[16];

		if (s == NULL)
			continue;
		SpinLockAcquire(&s->mutex);
		pid = s->dboid == MyDatabaseId ? s->worker_pid : 0;
		SpinLockRelease(&s->mutex);
		turn = pg_atomic_read_u64(&s->last_turn_ms);
		if (pid == 0 || turn == 0)
			continue;
		snprintf(worker, sizeof(worker), "%d", part);
		sample1(em, "jobflow_worker_last_turn_timestamp_seconds", "worker", worker,
				unix_seconds(turn), help);
	}
}

/* How long pruning has had a backlog: 0 while it keeps up. */
static void
prune_behind(Emitter *em)
{
	uint64		since = pg_atomic_read_u64(&em->slot->prune_behind_ms);
	uint64		now = unix_now_ms();

	gauge(em, "jobflow_prune_behind_seconds",
		  since == 0 || now < since ? 0 : unix_seconds(now - since),
		  "Seconds since pruning under jobflow.retention has had finished tasks waiting for it without catching up; 0 while it keeps up.");
}

/* One queue's figures, as queue_figures reads them. */
typedef struct QueueFigures
{
	char	   *owner;
	char	   *queue;
	int64		pending;
	int64		overdue;
	double		oldest_overdue_s;
	int64		dead;
	bool		paused;
} QueueFigures;

/*
 * The figures of every queue that has a row in jobflow.queues or pending
 * or failed tasks, worst first (the oldest overdue task, then the most
 * overdue, pending, failed), at most JF_QUEUE_SERIES of them: queue names
 * are the tenants' to choose, and a tenant with a million of them must not
 * make a million series.  Each owner's worst queue comes before any
 * owner's second (then its third...): a tenant that makes 100 queues
 * "worst" (paused, with tasks due long ago) must not push every other
 * tenant's queues out of the figures and their alerts.  Read as the owner of jobflow.tasks (the reader
 * is jobflow_monitor, who reads no task), through the partial indexes of
 * pending and of failed tasks only: the cost follows the backlog and the
 * dead letters, never the finished tasks kept, so sequential scans are
 * ruled out for this statement (a small table would otherwise get one,
 * and a large one might, with many tasks pending).
 */
#define JF_QUEUE_SERIES 100

static const char *const queue_figures_sql =
	"SELECT x.owner::pg_catalog.oid, x.queue,"
	"       pg_catalog.max(x.pending), pg_catalog.max(x.overdue),"
	"       pg_catalog.min(x.oldest), pg_catalog.max(x.failed), pg_catalog.bool_or(x.paused),"
	"       pg_catalog.count(*) OVER ()"
	"  FROM (SELECT t.owner, t.queue, pg_catalog.count(*) AS pending,"
	"               pg_catalog.count(*) FILTER (WHERE t.run_at OPERATOR(pg_catalog.<=) $1) AS overdue,"
	"               pg_catalog.min(t.run_at) FILTER (WHERE t.run_at OPERATOR(pg_catalog.<=) $1) AS oldest,"
	"               0::pg_catalog.int8 AS failed, false AS paused"
	"          FROM jobflow.tasks t"
	"         WHERE t.state OPERATOR(pg_catalog.=) 'pending'::jobflow.task_state"
	"         GROUP BY t.owner, t.queue"
	"        UNION ALL"
	"        SELECT t.owner, t.queue, 0, 0, NULL, pg_catalog.count(*), false"
	"          FROM jobflow.tasks t"
	"         WHERE t.state OPERATOR(pg_catalog.=) 'failed'::jobflow.task_state"
	"         GROUP BY t.owner, t.queue"
	"        UNION ALL"
	"        SELECT q.owner, q.name, 0, 0, NULL, 0, q.paused"
	"          FROM jobflow.queues q) x"
	" GROUP BY x.owner, x.queue"
	" ORDER BY pg_catalog.row_number() OVER (PARTITION BY x.owner"
	"          ORDER BY pg_catalog.min(x.oldest) NULLS LAST, pg_catalog.max(x.overdue) DESC,"
	"                   pg_catalog.max(x.pending) DESC, pg_catalog.max(x.failed) DESC, x.queue),"
	"          5 NULLS LAST, 4 DESC, 3 DESC, 6 DESC, 1, 2"
	" LIMIT " CppAsString2(JF_QUEUE_SERIES);

/*
 * The last figures read, for a second: an exporter reads jobflow.stats
 * once per label set (six statements a scrape), and the queries would
 * otherwise run six times.
 */
#define QUEUE_FIGURES_KEEP_US	USECS_PER_SEC
static QueueFigures *kept_figures;
static int	kept_n;
static int64 kept_all;
static TimestampTz kept_at;

static int
read_queue_figures(QueueFigures **out, int64 *all)
{
	MemoryContext caller = TopMemoryContext;
	TimestampTz now = GetCurrentTimestamp();
	Oid			types[1] = {TIMESTAMPTZOID};
	Datum		values[1] = {TimestampTzGetDatum(now)};
	JfAsOwner	as_owner;
	QueueFigures *q;
	uint64		i;
	int			n;

	if (kept_figures != NULL && now >= kept_at && now - kept_at < QUEUE_FIGURES_KEEP_US)
	{
		*out = kept_figures;
		*all = kept_all;
		return kept_n;
	}
	*all = 0;
	SPI_connect();
	jf_as_owner_begin("tasks", &as_owner);
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	/* its costs are huge now: not worth compiling it (JIT took 300 ms) */
	(void) set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (SPI_execute_with_args(queue_figures_sql, 1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the figures of jobflow's queues");
	jf_as_owner_end(&as_owner);
	n = (int) SPI_processed;
	q = MemoryContextAllocZero(caller, sizeof(QueueFigures) * Max(n, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Oid			owner = DatumGetObjectId(SPI_getbinval(tup, desc, 1, &isnull));
		char	   *name = GetUserNameFromId(owner, true);
		Datum		d;

		q[i].owner = name ? MemoryContextStrdup(caller, name) :
			MemoryContextStrdup(caller, psprintf("%u", owner));
		q[i].queue = MemoryContextStrdup(caller, TextDatumGetCString(SPI_getbinval(tup, desc, 2, &isnull)));
		q[i].pending = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
		q[i].overdue = DatumGetInt64(SPI_getbinval(tup, desc, 4, &isnull));
		d = SPI_getbinval(tup, desc, 5, &isnull);
		q[i].oldest_overdue_s = isnull ? 0 :
			Max(0, (double) (now - DatumGetTimestampTz(d)) / USECS_PER_SEC);
		q[i].dead = DatumGetInt64(SPI_getbinval(tup, desc, 6, &isnull));
		q[i].paused = DatumGetBool(SPI_getbinval(tup, desc, 7, &isnull));
		*all = DatumGetInt64(SPI_getbinval(tup, desc, 8, &isnull));
	}
	SPI_finish();
	if (kept_figures != NULL)
	{
		for (i = 0; i < (uint64) kept_n; i++)
		{
			pfree(kept_figures[i].owner);
			pfree(kept_figures[i].queue);
		}
		pfree(kept_figures);
	}
	kept_figures = q;
	kept_n = n;
	kept_all = *all;
	kept_at = now;
	*out = q;
	return n;
}

/* Per queue: the backlog, its age, the dead letters, whether paused. */
static void
queue_figures(Emitter *em)
{
	static const char *const help_pending = "Pending tasks of the queue (due or not).";
	static const char *const help_overdue = "Pending tasks of the queue whose due time has passed.";
	static const char *const help_oldest = "Seconds since the due time of the queue's oldest overdue task (0 when none is overdue).";
	static const char *const help_dead = "Failed tasks of the queue kept in jobflow.tasks (dead letters; see jobflow.failed_tasks).";
	static const char *const help_paused = "1 while the queue is paused.";
	static const char *const help_queues = "Queues with figures (a row in jobflow.queues, pending or failed tasks); 100 are shown by queue, each owner's worst first.";
	QueueFigures *q;
	int64		all;
	int			n = read_queue_figures(&q, &all);
	int			i;
	Label		l[2] = {{"owner", NULL}, {"queue", NULL}};

#define QUEUE_FAMILY(fname, help, field) \
	do { \
		family(em, fname, "gauge", help); \
		for (i = 0; i < n; i++) \
		{ \
			l[0].value = q[i].owner; \
			l[1].value = q[i].queue; \
			sample(em, fname, l, 2, (double) (q[i].field), help); \
		} \
	} while (0)

	QUEUE_FAMILY("jobflow_queue_pending", help_pending, pending);
	QUEUE_FAMILY("jobflow_queue_overdue", help_overdue, overdue);
	QUEUE_FAMILY("jobflow_queue_oldest_overdue_seconds", help_oldest, oldest_overdue_s);
	QUEUE_FAMILY("jobflow_queue_dead_letters", help_dead, dead);
	QUEUE_FAMILY("jobflow_queue_paused", help_paused, paused ? 1 : 0);
#undef QUEUE_FAMILY
	gauge(em, "jobflow_queues", (double) all, help_queues);
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
	worker_turns(em);
	busiest_hosts(em);
	gauge(em, "jobflow_circuits_open", (double) jf_circuits_open_total(),
		  "Circuits of (owner, origin) open or half-open: origins that failed jobflow.circuit_failures times in a row for an owner, whose tasks there are held but for a probe.");
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
		sample1(em, "jobflow_outcomes_total", "class", jf_http_class_name(i),
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
	counter(em, "jobflow_cron_skipped_total",
			pg_atomic_read_u64(&m->counters[JF_COUNT_CRON_SKIPPED]),
			"Cron occurrences cancelled by their timer's overlap policy (skip, or queue with one already waiting).");
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
	prune_behind(em);
	queue_figures(em);
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
 * jobflow._figures() RETURNS TABLE (metric, labels, value, description,
 * label_set) (jobflow._stats() in 0.2.0, without label_set):
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
