/*-------------------------------------------------------------------------
 *
 * prune.c
 *	  Retention: the worker removes finished tasks (succeeded, failed,
 *	  cancelled) older than jobflow.retention, with their log rows.
 *
 * Pruning shares the worker's loop with dispatching, so it works in small
 * batches (jobflow.prune_batch_size tasks, one short transaction each) and
 * only in the gaps: a batch runs when no task of the wheel is due within
 * PRUNE_SLACK_MS and no request waits to be sent, so it never stands
 * between a due task and its claim.  A backlog (the last batch was full)
 * brings the next batch at the next quiet turn; otherwise the worker looks
 * again after jobflow.reconcile_interval.  When the worker never finds a
 * gap for PRUNE_STARVE_MS, one batch runs anyway: a table that grows
 * without bound would hurt far more than one batch's delay.
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

#include "prune.h"

#define PRUNE_SLACK_MS		20
#define PRUNE_STARVE_MS		5000

static int64 next_prune_ms = 0;
static int64 last_prune_ms = 0;

/*
 * When the loop should come back for pruning: now while a backlog
 * remains, else at the next look.  Infinity when retention is off.
 */
int64
prune_deadline(void)
{
	if (jobflow_retention_s == 0)
		return INT64_MAX;
	return next_prune_ms;
}

/*
 * One batch, if it is time and the worker has a gap: nothing of the wheel
 * due within PRUNE_SLACK_MS and no request waiting to be sent.  Without a
 * gap, look again shortly (the loop wakes for due tasks anyway).
 */
void
prune_turn(WorkerState *ws)
{
	int64		now_ms = jf_now_ms();
	Oid			types[2] = {INT4OID, INT4OID};
	Datum		values[2];
	bool		isnull;
	int64		tasks;
	int64		logs;

	if (jobflow_retention_s == 0 || now_ms < next_prune_ms)
		return;
	if ((jf_http_queued(ws->http) > 0 ||
		 jf_wheel_next_deadline(ws->wheel) < now_ms + PRUNE_SLACK_MS) &&
		now_ms < last_prune_ms + PRUNE_STARVE_MS)
	{
		next_prune_ms = now_ms + PRUNE_SLACK_MS;
		return;
	}

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
	worker_count_statement(1);

	pg_atomic_fetch_add_u64(&jobflow_shared->pruned_tasks, tasks);
	pg_atomic_fetch_add_u64(&jobflow_shared->pruned_log_rows, logs);
	last_prune_ms = jf_now_ms();
	/* a full batch says more are waiting: come back at the next gap */
	next_prune_ms = tasks >= jobflow_prune_batch_size ? last_prune_ms :
		last_prune_ms + jobflow_reconcile_ms;
}
