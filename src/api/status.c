/*-------------------------------------------------------------------------
 *
 * status.c
 *	  The SQL functions that read what this database's workers publish in
 *	  their slots: jobflow.worker_status(), jobflow._wakeups() and
 *	  jobflow._wake_horizon().
 *
 * What they show is advisory: the workers write their figures with
 * atomics and no lock, and a reader may see them mid-turn.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "launcher/slots.h"
#include "launcher/wake.h"

PG_FUNCTION_INFO_V1(jobflow_wake_horizon);
Datum
jobflow_wake_horizon(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(jf_notify_before());
}

static Datum
ms_to_timestamptz_datum(uint64 ms, bool *isnull)
{
	*isnull = (ms == 0);
	return TimestampTzGetDatum((TimestampTz) ((int64) ms * 1000 -
											  (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY));
}

/*
 * Wake-ups published since the server started: id ranges of committed
 * tasks the worker had to load soon, and commits that changed timers.
 */
PG_FUNCTION_INFO_V1(jobflow_wakeups);
Datum
jobflow_wakeups(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	JfSlot	   *s = jf_reader_slot();

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	values[0] = Int64GetDatum(pg_atomic_read_u64(&s->wake_ranges));
	values[1] = Int64GetDatum(pg_atomic_read_u64(&s->wake_timers));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/*
 * What this database's worker is doing, for operators: its pid (NULL when
 * no worker is attached), what it holds, cumulative counters since it
 * began serving the database, and why it claims nothing if it does not.
 */
PG_FUNCTION_INFO_V1(jobflow_worker_status);
Datum
jobflow_worker_status(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[17];
	bool		nulls[17];
	uint64		held;
	pid_t		pid;
	JfSlot	   *s = jf_reader_slot();
	int			i = 0;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	memset(nulls, 0, sizeof(nulls));

	SpinLockAcquire(&s->mutex);
	pid = s->dboid == MyDatabaseId ? s->worker_pid : 0;
	SpinLockRelease(&s->mutex);

	values[i] = Int32GetDatum(pid);
	nulls[i++] = (pid == 0);
	values[i] = ms_to_timestamptz_datum(pg_atomic_read_u64(&s->started_ms), &nulls[i]);
	i++;
	values[i++] = Int64GetDatum(jf_gauge_sum(offsetof(JfSlot, wheel_tasks)));
	values[i++] = Int64GetDatum(jf_gauge_sum(offsetof(JfSlot, wheel_bytes)));
	values[i] = ms_to_timestamptz_datum(pg_atomic_read_u64(&s->horizon_end_ms), &nulls[i]);
	i++;
	values[i++] = Int64GetDatum(jf_gauge_sum(offsetof(JfSlot, in_flight)));
	values[i++] = Int64GetDatum(jf_gauge_sum(offsetof(JfSlot, queued)));
	values[i++] = Int64GetDatum(jf_gauge_sum(offsetof(JfSlot, buffered_rows)));
	values[i] = ms_to_timestamptz_datum(pg_atomic_read_u64(&s->last_flush_ms), &nulls[i]);
	i++;
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->fired));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->succeeded));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->failed));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->retried));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->flushes));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->flushed_rows));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->statements));
	Assert(i == 16);
	/* why it claims nothing, if it does not (0.3.0's column; not in 0.2.0) */
	if (desc->natts > 16)
	{
		held = pid == 0 ? JF_HELD_NO : pg_atomic_read_u64(&s->held);
		nulls[i] = held == JF_HELD_NO || held >= JF_HELD_REASONS;
		if (!nulls[i])
			values[i] = CStringGetTextDatum(jf_held_names[held]);
		i++;
	}

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
