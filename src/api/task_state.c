/*-------------------------------------------------------------------------
 *
 * task_state.c
 *	  The task state machine: which updates of jobflow.tasks may change a
 *	  task's state, what a redrive resets, and whether an update changes
 *	  what a task sends.
 *
 * The row trigger of jobflow.tasks (task_check.c) asks these on every
 * update.  Moves into and out of running belong to the worker; a failed
 * or cancelled task may go back to pending (a redrive); a succeeded task
 * is never sent again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"

#include "api/task_state.h"
#include "launcher/slots.h"

/* A column of a row (heap_getattr is a macro; this keeps calls short). */
static Datum
heap_getattr_col(HeapTuple tuple, TupleDesc desc, int attnum, bool *isnull)
{
	return heap_getattr(tuple, attnum, desc, isnull);
}

const char *
jf_task_state_name(Datum state)
{
	return DatumGetCString(DirectFunctionCall1(enum_out, state));
}

/*
 * The state machine of jobflow--0.1.0.sql, plus the redrive of 0.2.0.
 * Moves into and out of running belong to the worker: a role that could
 * mark its own task succeeded could hide a callback that never happened.
 * A failed or cancelled task may go back to pending (a redrive, returns
 * true): who may do that is decided by row-level security, which lets
 * tenants update pending rows only, so they redrive through
 * jobflow.retry().  A succeeded task is never sent again.
 */
bool
jf_task_check_transition(HeapTuple oldtup, HeapTuple newtup, TupleDesc desc,
						 JfTaskColumns *cols)
{
	bool		isnull;
	const char *from = jf_task_state_name(heap_getattr_col(oldtup, desc, cols->state, &isnull));
	const char *to = jf_task_state_name(heap_getattr_col(newtup, desc, cols->state, &isnull));
	bool		privileged = jf_am_worker || superuser();
	int64		id = DatumGetInt64(heap_getattr_col(newtup, desc, cols->id, &isnull));

	if (strcmp(from, to) == 0 && strcmp(from, "pending") == 0)
		return false;
	if ((strcmp(from, "failed") == 0 || strcmp(from, "cancelled") == 0) &&
		strcmp(to, "pending") == 0 && cols->attempts_base > 0)
		return true;
	if (strcmp(from, "succeeded") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("task %lld is already %s", (long long) id, from),
				 errdetail("Succeeded tasks cannot change.")));
	if (strcmp(from, "failed") == 0 || strcmp(from, "cancelled") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("task %lld is already %s", (long long) id, from),
				 errdetail("Failed and cancelled tasks can only go back to pending."),
				 errhint("Use jobflow.retry() to run the task again.")));
	if (strcmp(from, "pending") == 0 && strcmp(to, "cancelled") == 0)
		return false;
	if ((strcmp(from, "pending") == 0 && strcmp(to, "running") == 0) ||
		(strcmp(from, "running") == 0 &&
		 (strcmp(to, "succeeded") == 0 || strcmp(to, "failed") == 0 ||
		  strcmp(to, "pending") == 0 || strcmp(to, "running") == 0)))
	{
		if (!privileged)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("only the jobflow worker can move task %lld from %s to %s",
							(long long) id, from, to)));
		return false;
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("task %lld cannot move from %s to %s", (long long) id, from, to),
			 errhint("A pending task can be cancelled or rescheduled.")));
	return false;				/* keep compiler quiet */
}

/*
 * A redriven task gets a fresh attempt budget: the attempts it was given
 * last time (max_attempts - attempts_base) counted from the attempts it
 * has made.  attempts itself never goes back, so attempt numbers in
 * task_log and X-Jobflow-Attempt keep increasing and never repeat, and
 * the worker's absolute test (attempts against max_attempts) needs no
 * change.
 */
void
jf_task_redrive(HeapTuple oldtup, TupleDesc desc, JfTaskColumns *cols,
				Datum *repl, bool *replace)
{
	bool		isnull;
	int32		attempts = DatumGetInt32(heap_getattr_col(oldtup, desc, cols->attempts, &isnull));
	int32		max_attempts = DatumGetInt32(heap_getattr_col(oldtup, desc, cols->max_attempts, &isnull));
	int32		base = DatumGetInt32(heap_getattr_col(oldtup, desc, cols->attempts_base, &isnull));
	int32		budget = Max(max_attempts - base, 1);

	if (attempts > PG_INT32_MAX - budget)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("task has made too many attempts to be retried")));
	repl[cols->max_attempts - 1] = Int32GetDatum(attempts + budget);
	replace[cols->max_attempts - 1] = true;
	repl[cols->attempts_base - 1] = Int32GetDatum(attempts);
	replace[cols->attempts_base - 1] = true;
}

/*
 * Whether an update changes what the task sends.  Rules apply to what
 * enters the table or changes in it: a task stored under the rules of an
 * older version (0.1.0 let "http://127.1/" or two Content-Type headers in)
 * must still be retried, rescheduled or rescued by the worker, whose
 * updates only move state, times and counters.
 */
bool
jf_task_request_changed(HeapTuple oldtup, HeapTuple newtup, TupleDesc desc,
						JfTaskColumns *cols)
{
	int			attnums[] = {cols->url, cols->method, cols->headers, cols->body,
		cols->content_type, cols->max_attempts, cols->timeout_ms, cols->queue,
		cols->body_bytes};
	int			i;

	for (i = 0; i < lengthof(attnums); i++)
	{
		Form_pg_attribute att;
		bool		old_null;
		bool		new_null;
		Datum		old_value;
		Datum		new_value;

		if (attnums[i] == 0)
			continue;			/* no body_bytes column */
		att = TupleDescAttr(desc, attnums[i] - 1);
		old_value = heap_getattr_col(oldtup, desc, attnums[i], &old_null);
		new_value = heap_getattr_col(newtup, desc, attnums[i], &new_null);
		if (old_null != new_null ||
			(!old_null && !datumIsEqual(old_value, new_value, att->attbyval, att->attlen)))
			return true;
	}
	return false;
}
