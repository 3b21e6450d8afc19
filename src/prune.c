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
 *-------------------------------------------------------------------------
 */
#include "worker.h"

#include "fault.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "prune.h"
#include "xact.h"

#define PRUNE_SLACK_MS		2
#define PRUNE_MAX_DEFER_MS	100
#define PRUNE_SHARE			4

static int64 due_ms = 0;		/* the next batch may run from then on */
static int64 try_ms = 0;		/* waiting for a gap: look again then */
static bool backlog = false;	/* the last batch was full */

/*
 * When the loop should come back for pruning: now while a backlog
 * remains, else at the next look.  Infinity when retention is off.
 */
int64
jf_prune_deadline(void)
{
	if (jobflow_retention_s == 0)
		return INT64_MAX;
	return Max(due_ms, try_ms);
}

/*
 * One batch, once it is due: during a backlog at once (the share paces
 * it), else in a gap (nothing of the wheel due within PRUNE_SLACK_MS, no
 * request waiting to be sent) or, failing a gap, PRUNE_MAX_DEFER_MS after
 * it was due.  Waiting for a gap, look again in a millisecond (the loop
 * wakes for due tasks anyway).
 */
void
jf_prune_turn(WorkerState *ws)
{
	int64		now_ms = jf_now_ms();
	TimestampTz start;
	int64		took_us;
	Oid			types[2] = {INT4OID, INT4OID};
	Datum		values[2];
	bool		isnull;
	int64		tasks;
	int64		logs;

	if (jobflow_retention_s == 0 || now_ms < Max(due_ms, try_ms))
		return;
	if (!backlog &&
		(jf_http_queued(ws->http) > 0 ||
		 jf_wheel_next_deadline(ws->wheel) < now_ms + PRUNE_SLACK_MS) &&
		now_ms < due_ms + PRUNE_MAX_DEFER_MS)
	{
		try_ms = now_ms + 1;
		return;
	}
	try_ms = 0;
	start = GetCurrentTimestamp();

	jf_xact_begin("jobflow: pruning finished tasks");
	jf_fault("prune");
	values[0] = Int32GetDatum(jobflow_retention_s);
	values[1] = Int32GetDatum(jobflow_prune_batch_size);
	if (SPI_execute_with_args(
							  "WITH doomed AS ("
							  "  SELECT t.id FROM jobflow.tasks t"
							  "   WHERE t.state IN ('succeeded', 'failed', 'cancelled')"
							  "     AND t.updated_at < pg_catalog.now()"
							  "         - pg_catalog.make_interval(secs => $1)"
							  "   ORDER BY t.updated_at LIMIT $2"
							  "   FOR UPDATE SKIP LOCKED),"
							  " gone AS ("
							  "  DELETE FROM jobflow.tasks t USING doomed d"
							  "   WHERE t.id = d.id RETURNING t.id),"
							  " logs AS ("
							  "  DELETE FROM jobflow.task_log l USING gone g"
							  "   WHERE l.task_id = g.id RETURNING 1)"
							  " SELECT (SELECT pg_catalog.count(*) FROM gone),"
							  "        (SELECT pg_catalog.count(*) FROM logs)",
							  2, types, values, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not prune finished tasks");
	tasks = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	logs = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	jf_xact_commit();
	jf_xact_count_statements(1);

	pg_atomic_fetch_add_u64(&jobflow_shared->pruned_tasks, tasks);
	pg_atomic_fetch_add_u64(&jobflow_shared->pruned_log_rows, logs);
	/* a full batch says more are waiting: come back soon, within the share */
	now_ms = jf_now_ms();
	took_us = GetCurrentTimestamp() - start;
	backlog = tasks >= jobflow_prune_batch_size;
	due_ms = backlog ?
		now_ms + Max((int64) 1, ((PRUNE_SHARE - 1) * took_us + 999) / 1000) :
		now_ms + jobflow_reconcile_ms;
}
