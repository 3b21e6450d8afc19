/*-------------------------------------------------------------------------
 *
 * prune.c
 *	  Retention: the worker removes finished tasks (succeeded, failed,
 *	  cancelled) older than jobflow.retention, with their log rows.
 *
 * Pruning shares the worker's loop with dispatching, so it works in small
 * batches (jobflow.prune_batch_size tasks, one short transaction each).
 * The first batch of a look runs preferably in a gap: when no task of the
 * wheel is due within PRUNE_SLACK_MS and no request waits to be sent, or,
 * when no such gap comes, PRUNE_MAX_DEFER_MS after it was due.  While a
 * backlog remains (the last batch was full), batches take at most one
 * PRUNE_SHARE-th of the loop's time: the next one waits (PRUNE_SHARE - 1)
 * times as long as the last one took, and then runs without waiting for a
 * gap, since under sustained load none comes (waiting PRUNE_MAX_DEFER_MS
 * for each batch capped pruning at ten batches a second: 1,000 tasks/s in
 * batches of 100, far behind 10,000 callbacks/s).  A task and its log rows
 * cost 12 to 20 us to delete, so keeping up with 10,000 callbacks/s takes
 * 12 to 20% of the loop: hence a share of a quarter.  Otherwise the worker
 * looks again after jobflow.reconcile_interval.  bench/retention.sh
 * measures what that costs in lateness.
 *
 * The batch deletes the oldest finished tasks first through the partial
 * index tasks_finished_at, and their log rows in the same statement; the
 * statement trigger task_log_cascade would remove log rows of any other
 * delete (jobflow.prune(), an administrator's DELETE), so a task and its
 * log always go together.  Finished rows are never locked by tenants
 * (row-level security lets them update pending rows only) nor by the
 * worker, so the delete waits for nobody; SKIP LOCKED covers the rest.
 *
 * The tasks at jobflow.retention are read through tasks_finished_at
 * (updated_at, id) from where the last batch stopped (mark_at, mark_id),
 * not from the oldest: the index entries of tasks deleted since the last
 * VACUUM lead the index, and every batch would read them all again.  The
 * mark starts from the oldest again when the queues' settings change,
 * when the worker starts and every MARK_RESET_MS, for a task that finished
 * behind it (a transaction that set updated_at and committed later).
 *
 * A queue may have a retention of its own (jobflow.queues.retention; 0
 * keeps its tasks).  Then the batch has two parts: the queues with a
 * positive retention of their own, each through the partial index
 * tasks_finished_queue (owner, queue, updated_at); and the rest at
 * jobflow.retention from the mark, passing over the tasks of queues with
 * their own retention (the mark also keeps those from being passed over
 * again by every batch).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "worker/prune.h"
#include "base/fault.h"
#include "worker/queues.h"
#include "worker/state.h"
#include "worker/xact.h"

#define PRUNE_SLACK_MS		2
#define PRUNE_MAX_DEFER_MS	100
#define PRUNE_SHARE			4
#define MARK_RESET_MS		(3600 * 1000)

/* The pruner's state: its pace, and its mark. */
struct JfPrune
{
	int64		due_ms;			/* the next batch may run from then on */
	int64		try_ms;			/* waiting for a gap: look again then */
	bool		backlog;		/* the last batch was full */
	int64		backlog_since_ms;	/* since when, without a batch that was not */
	int64		published_ms;	/* what the slot says of it; -1: not yet said */
	/* where the default part goes on from, with queue retentions set */
	TimestampTz mark_at;
	int64		mark_id;
	int64		mark_reset_ms;
};

JfPrune *
jf_prune_create(MemoryContext cxt)
{
	JfPrune    *p = MemoryContextAllocZero(cxt, sizeof(JfPrune));

	TIMESTAMP_NOBEGIN(p->mark_at);
	p->published_ms = -1;
	return p;
}

/* The default part starts from the oldest finished task again. */
void
jf_prune_reset_mark(JfPrune *p)
{
	TIMESTAMP_NOBEGIN(p->mark_at);
	p->mark_id = 0;
	p->mark_reset_ms = jf_now_ms() + MARK_RESET_MS;
}

/*
 * Whether anything is to be pruned at all (by this worker: the first of
 * the database's prunes for all of them).
 */
static bool
prune_enabled(JfWorkerState *ws)
{
	bool		positive;

	if (jf_worker_part != 0)
		return false;
	if (jobflow_retention_s > 0)
		return true;
	(void) jf_queues_retention_overrides(ws, &positive);
	return positive;
}

/*
 * Since when pruning has been behind, for jobflow_prune_behind_seconds,
 * in the slot where the database's figures add up: by the first worker
 * only (it prunes for all), and only when it changed.
 */
static void
publish_behind(JfPrune *p)
{
	if (jf_worker_part != 0 || p->published_ms == p->backlog_since_ms)
		return;
	pg_atomic_write_u64(&jf_figures->prune_behind_ms, (uint64) p->backlog_since_ms);
	p->published_ms = p->backlog_since_ms;
}

/*
 * When the loop should come back for pruning: now while a backlog
 * remains, else at the next look.  Infinity when retention is off: then
 * nothing is behind either, whatever a backlog was when it was turned off
 * (or what a worker before this one left in the slot).
 */
int64
jf_prune_deadline(JfWorkerState *ws)
{
	JfPrune    *p = ws->prune;

	if (!prune_enabled(ws))
	{
		p->backlog = false;
		p->backlog_since_ms = 0;
		publish_behind(p);
		return INT64_MAX;
	}
	return Max(p->due_ms, p->try_ms);
}

/*
 * Read a batch's result row (tasks pruned, log rows, the last finishing
 * time and id it looked at) and move the mark past what it looked at.
 * Returns the tasks pruned, *logs their log rows.
 */
static int64
batch_result(JfPrune *p, int64 *logs)
{
	TupleDesc	desc = SPI_tuptable->tupdesc;
	HeapTuple	tup = SPI_tuptable->vals[0];
	bool		isnull;
	Datum		d;

	*logs = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
	d = SPI_getbinval(tup, desc, 3, &isnull);
	if (!isnull)
	{
		p->mark_at = DatumGetTimestampTz(d);
		p->mark_id = DatumGetInt64(SPI_getbinval(tup, desc, 4, &isnull));
	}
	return DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
}

/*
 * One batch with queue retentions set (see the file header): the queues'
 * own part, then the default part from the mark on, which moves the mark
 * past what it looked at.  Returns the tasks pruned, *logs their log rows,
 * *full whether either part had a full batch (more may wait).
 * values: jobflow.retention (s), the batch size, the mark.
 */
static int64
prune_with_queues(JfPrune *p, Datum *values, Oid *types, int64 *logs, bool *full)
{
	bool		isnull;

	if (SPI_execute_with_args(
							  "WITH own AS ("
							  "  SELECT x.id FROM jobflow.queues q CROSS JOIN LATERAL ("
							  "    SELECT t.id FROM jobflow.tasks t"
							  "     WHERE t.owner = q.owner AND t.queue = q.name"
							  "       AND t.state IN ('succeeded', 'failed', 'cancelled')"
							  "       AND t.updated_at < pg_catalog.now() - q.retention"
							  "     ORDER BY t.updated_at LIMIT $2"
							  "     FOR UPDATE OF t SKIP LOCKED) x"
							  "   WHERE q.retention > interval '0'"
							  "   LIMIT $2),"
							  " seen AS ("
							  "  SELECT t.id, t.owner, t.queue, t.updated_at FROM jobflow.tasks t"
							  "   WHERE t.state IN ('succeeded', 'failed', 'cancelled')"
							  "     AND $1 > 0"
							  "     AND t.updated_at < pg_catalog.now()"
							  "         - pg_catalog.make_interval(secs => $1)"
							  "     AND (t.updated_at, t.id) > ($3, $4)"
							  "   ORDER BY t.updated_at, t.id LIMIT $2),"
							  " rest AS ("
							  "  SELECT t.id FROM jobflow.tasks t JOIN seen s ON s.id = t.id"
							  "   WHERE NOT EXISTS (SELECT 1 FROM jobflow.queues q"
							  "                      WHERE q.owner = s.owner AND q.name = s.queue"
							  "                        AND q.retention IS NOT NULL)"
							  "   FOR UPDATE OF t SKIP LOCKED),"
							  " gone AS ("
							  "  DELETE FROM jobflow.tasks t"
							  "   WHERE t.id IN (SELECT id FROM own UNION SELECT id FROM rest)"
							  "  RETURNING t.id),"
							  " logs AS ("
							  "  DELETE FROM jobflow.task_log l USING gone g"
							  "   WHERE l.task_id = g.id RETURNING 1),"
							  " last AS ("
							  "  SELECT s.updated_at, s.id FROM seen s"
							  "   ORDER BY s.updated_at DESC, s.id DESC LIMIT 1)"
							  " SELECT (SELECT pg_catalog.count(*) FROM gone),"
							  "        (SELECT pg_catalog.count(*) FROM logs),"
							  "        (SELECT updated_at FROM last), (SELECT id FROM last),"
							  "        (SELECT pg_catalog.count(*) FROM own)"
							  "        OPERATOR(pg_catalog.>=) $2"
							  "        OR (SELECT pg_catalog.count(*) FROM seen)"
							  "        OPERATOR(pg_catalog.>=) $2",
							  4, types, values, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not prune finished tasks");
	*full = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5,
									   &isnull));
	return batch_result(p, logs);
}

/*
 * One batch without queue retentions: the oldest finished tasks past the
 * mark, which moves past them.  From the oldest each time, the batch read
 * again the index entries of every task deleted since the last VACUUM
 * (they lead tasks_finished_at and nothing cleans them sooner): at 10,000
 * callbacks/s a batch's cost grew until autovacuum ran, and pruning fell
 * behind.  Returns the tasks pruned, *logs their log rows.  values as for
 * prune_with_queues.
 */
static int64
prune_from_mark(JfPrune *p, Datum *values, Oid *types, int64 *logs)
{
	if (SPI_execute_with_args(
							  "WITH doomed AS ("
							  "  SELECT t.id, t.updated_at FROM jobflow.tasks t"
							  "   WHERE t.state IN ('succeeded', 'failed', 'cancelled')"
							  "     AND t.updated_at < pg_catalog.now()"
							  "         - pg_catalog.make_interval(secs => $1)"
							  "     AND (t.updated_at, t.id) > ($3, $4)"
							  "   ORDER BY t.updated_at, t.id LIMIT $2"
							  "   FOR UPDATE SKIP LOCKED),"
							  " gone AS ("
							  "  DELETE FROM jobflow.tasks t USING doomed d"
							  "   WHERE t.id = d.id RETURNING t.id),"
							  " logs AS ("
							  "  DELETE FROM jobflow.task_log l USING gone g"
							  "   WHERE l.task_id = g.id RETURNING 1),"
							  " last AS ("
							  "  SELECT d.updated_at, d.id FROM doomed d"
							  "   ORDER BY d.updated_at DESC, d.id DESC LIMIT 1)"
							  " SELECT (SELECT pg_catalog.count(*) FROM gone),"
							  "        (SELECT pg_catalog.count(*) FROM logs),"
							  "        (SELECT updated_at FROM last), (SELECT id FROM last)",
							  4, types, values, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not prune finished tasks");
	return batch_result(p, logs);
}

/*
 * One batch, once it is due: during a backlog at once (the share paces
 * it), else in a gap (nothing of the wheel due within PRUNE_SLACK_MS, no
 * request waiting to be sent) or, failing a gap, PRUNE_MAX_DEFER_MS after
 * it was due.  Waiting for a gap, look again in a millisecond (the loop
 * wakes for due tasks anyway).
 */
void
jf_prune_turn(JfWorkerState *ws)
{
	JfPrune    *p = ws->prune;
	int64		now_ms = jf_now_ms();
	TimestampTz start;
	int64		took_us;
	Oid			types[4] = {INT4OID, INT4OID, TIMESTAMPTZOID, INT8OID};
	Datum		values[4];
	int64		tasks;
	int64		logs;
	bool		positive;
	bool		overrides = jf_queues_retention_overrides(ws, &positive);
	bool		full = false;

	if (!prune_enabled(ws) || now_ms < Max(p->due_ms, p->try_ms))
		return;
	if (!p->backlog &&
		(jf_http_queued(ws->http) > 0 ||
		 jf_wheel_next_deadline(ws->wheel) < now_ms + PRUNE_SLACK_MS) &&
		now_ms < p->due_ms + PRUNE_MAX_DEFER_MS)
	{
		p->try_ms = now_ms + 1;
		return;
	}
	p->try_ms = 0;
	start = GetCurrentTimestamp();

	jf_xact_begin("jobflow: pruning finished tasks");
	jf_fault("prune");
	values[0] = Int32GetDatum(jobflow_retention_s);
	values[1] = Int32GetDatum(jobflow_prune_batch_size);
	if (now_ms >= p->mark_reset_ms)
		jf_prune_reset_mark(p);
	values[2] = TimestampTzGetDatum(p->mark_at);
	values[3] = Int64GetDatum(p->mark_id);
	if (overrides)
		tasks = prune_with_queues(p, values, types, &logs, &full);
	else
		tasks = prune_from_mark(p, values, types, &logs);
	jf_xact_commit();
	jf_xact_count_statements(1);

	pg_atomic_fetch_add_u64(&jf_figures->pruned_tasks, tasks);
	pg_atomic_fetch_add_u64(&jf_figures->pruned_log_rows, logs);
	/* a full batch says more are waiting: come back soon, within the share */
	now_ms = jf_now_ms();
	took_us = GetCurrentTimestamp() - start;
	p->backlog = full || tasks >= jobflow_prune_batch_size;
	/* how long it has been behind, for jobflow_prune_behind_seconds */
	if (!p->backlog)
		p->backlog_since_ms = 0;
	else if (p->backlog_since_ms == 0)
		p->backlog_since_ms = now_ms;
	publish_behind(p);
	p->due_ms = p->backlog ?
		now_ms + Max((int64) 1, ((PRUNE_SHARE - 1) * took_us + 999) / 1000) :
		now_ms + jobflow_reconcile_ms;
}
