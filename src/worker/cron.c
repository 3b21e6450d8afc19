/*-------------------------------------------------------------------------
 *
 * cron.c
 *	  The worker's materialiser of cron timers: jobflow._materialize_cron()
 *	  turns the occurrences due soon into ordinary tasks.
 *
 * Occurrences become tasks ahead of time, and each timer's next_at is the
 * first occurrence not yet materialised: the next one is always computed
 * from the schedule (base/cron_zone.c), never from when the previous one
 * fired, so nothing drifts.  The unique index on (cron_id, cron_at) of
 * live tasks and ON CONFLICT DO NOTHING make materialising an occurrence
 * twice harmless; FOR UPDATE SKIP LOCKED keeps two callers from working
 * on one timer.  The worker calls it through SQL, in its feeder's
 * housekeeping (feed.c), and says which timers to look at (jf_cron_only)
 * and which occurrences count as missed (jf_cron_missed_before).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "worker/cron.h"
#include "base/compat.h"
#include "base/cron_zone.h"
#include "launcher/restore.h"
#include "launcher/slots.h"

/* an occurrence later than this is "missed" and follows the timer's policy */
#define CRON_GRACE_US		(5 * USECS_PER_SEC)

TimestampTz jf_cron_missed_before = 0;

/*
 * The timers the worker's next materialisation looks at, when it names
 * them (jf_cron_only): those whose rows committed transactions changed.
 */
static const int64 *only_ids = NULL;
static int	nonly = 0;
/* occurrences one timer may add in one call: bounds a per-second timer */
#define CRON_MAX_PER_CALL	10000

typedef struct Occurrences
{
	int			n;
	Datum	   *run_at;			/* when the task runs */
	Datum	   *cron_at;		/* which occurrence it stands for */
} Occurrences;

static void
add_occurrence(Occurrences *o, TimestampTz run_at, TimestampTz cron_at)
{
	o->run_at[o->n] = TimestampTzGetDatum(run_at);
	o->cron_at[o->n] = TimestampTzGetDatum(cron_at);
	o->n++;
}

static Datum
timestamp_array(Datum *values, int n)
{
	return PointerGetDatum(construct_array(values, n, TIMESTAMPTZOID, 8,
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * Work out one timer's occurrences in [next_at, until), with its missed
 * policy applied to those already more than the grace in the past
 * (first_missed, if any, is the earliest of them): "skip" resumes at the
 * first occurrence after now, "once" adds one task at now standing for
 * first_missed, then resumes likewise.  Returns the new next_at in *next,
 * or false when the schedule has no occurrence left.
 */
static bool
plan_timer(const JfCronSchedule *s, pg_tz *tz, TimestampTz next_at,
		   TimestampTz first_missed, bool once, TimestampTz now,
		   TimestampTz until, Occurrences *o, TimestampTz *next)
{
	TimestampTz t = next_at;

	if (first_missed != DT_NOEND)
	{
		if (once)
			add_occurrence(o, now, first_missed);
		if (!jf_cron_next_occurrence(s, tz, now, &t))
			return false;
	}
	while (t < until && o->n < CRON_MAX_PER_CALL)
	{
		add_occurrence(o, t, t);
		if (!jf_cron_next_occurrence(s, tz, t, &t))
			return false;
	}
	*next = t;
	return true;
}

/*
 * At worker start: pending occurrences that fell due more than the grace
 * ago, while no worker ran, are missed.  Cancel them and remember the
 * earliest per timer for the missed policy.  Returns the number of timers.
 */
static int
cancel_stale(TimestampTz before, int64 **ids, TimestampTz **earliest)
{
	Oid			types[1] = {TIMESTAMPTZOID};
	Datum		values[1] = {TimestampTzGetDatum(before)};
	int			ret;
	uint64		i;

	ret = SPI_execute_with_args(
		"WITH x AS ("
		"  UPDATE jobflow.tasks t SET state = 'cancelled',"
		"         last_error = 'missed: not fired while the worker was not running',"
		"         updated_at = pg_catalog.now()"
		"   WHERE t.cron_id IS NOT NULL AND t.state = 'pending'"
		"     AND t.attempts = 0 AND t.run_at < $1"
		"  RETURNING t.cron_id, t.cron_at)"
		" SELECT x.cron_id, pg_catalog.min(x.cron_at) FROM x GROUP BY x.cron_id",
		1, types, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "cancelling missed cron occurrences failed: %s",
			 SPI_result_code_string(ret));
	*ids = palloc(sizeof(int64) * (SPI_processed + 1));
	*earliest = palloc(sizeof(TimestampTz) * (SPI_processed + 1));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		(*ids)[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
												SPI_tuptable->tupdesc, 1, &isnull));
		(*earliest)[i] = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i],
														   SPI_tuptable->tupdesc, 2, &isnull));
	}
	return (int) SPI_processed;
}

/*
 * The worker's next calls of _materialize_cron() look at these timers
 * only (NULL: at every due one).  A commit that changed one timer costs
 * the worker a look at that timer by primary key, not a scan of them all.
 */
void
jf_cron_only(const int64 *ids, int n)
{
	only_ids = ids;
	nonly = n;
}

PG_FUNCTION_INFO_V1(jobflow_materialize_cron);
Datum
jobflow_materialize_cron(PG_FUNCTION_ARGS)
{
	TimestampTz until = PG_GETARG_TIMESTAMPTZ(0);
	bool		catch_up = PG_GETARG_BOOL(1);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz missed_before = now - CRON_GRACE_US;
	int64	   *stale_ids = NULL;
	TimestampTz *stale_at = NULL;
	int			nstale = 0;
	Datum	   *stale_datums;
	SPITupleTable *timers;
	uint64		ntimers;
	uint64		i;
	SPIPlanPtr	insert_plan;
	SPIPlanPtr	update_plan;
	Oid			insert_types[3] = {INT8OID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID};
	Oid			update_types[2] = {INT8OID, TIMESTAMPTZOID};
	Oid			select_types[2] = {TIMESTAMPTZOID, INT8ARRAYOID};
	Datum		select_values[2];
	Occurrences o;
	bool		restricted;
	int			ret;

	jf_init_materialized_srf(fcinfo);
	if (TIMESTAMP_NOT_FINITE(until))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("until must be a finite timestamp")));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	if (jf_cron_missed_before != 0 && jf_cron_missed_before < missed_before)
		missed_before = jf_cron_missed_before;
	restricted = jf_am_worker && only_ids != NULL;
	if (catch_up && !restricted)
		nstale = cancel_stale(missed_before, &stale_ids, &stale_at);
	stale_datums = palloc(sizeof(Datum) * (Max(nstale, nonly) + 1));
	for (i = 0; i < (uint64) nstale; i++)
		stale_datums[i] = Int64GetDatum(stale_ids[i]);

	select_values[0] = TimestampTzGetDatum(until);
	if (restricted)
	{
		/* the timers named, by primary key */
		for (i = 0; i < (uint64) nonly; i++)
			stale_datums[i] = Int64GetDatum(only_ids[i]);
		select_values[1] = PointerGetDatum(construct_array(stale_datums, nonly, INT8OID, 8,
														   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		ret = SPI_execute_with_args(
			"SELECT c.id, c.schedule, c.timezone, c.next_at, c.missed = 'once'"
			"  FROM jobflow.cron_timers c"
			" WHERE c.id = ANY ($2) AND c.active AND c.next_at IS NOT NULL"
			"   AND c.next_at < $1"
			" ORDER BY c.id FOR UPDATE SKIP LOCKED",
			2, select_types, select_values, NULL, false, 0);
	}
	else
	{
		select_values[1] = PointerGetDatum(construct_array(stale_datums, nstale, INT8OID, 8,
														   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		ret = SPI_execute_with_args(
			"SELECT c.id, c.schedule, c.timezone, c.next_at, c.missed = 'once'"
			"  FROM jobflow.cron_timers c"
			" WHERE c.active AND c.next_at IS NOT NULL"
			"   AND (c.next_at < $1 OR c.id = ANY ($2))"
			" ORDER BY c.id FOR UPDATE SKIP LOCKED",
			2, select_types, select_values, NULL, false, 0);
	}
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "reading cron timers failed: %s", SPI_result_code_string(ret));
	timers = SPI_tuptable;
	ntimers = SPI_processed;

	/*
	 * The worker checked for a restore in progress before this statement
	 * (worker/guard.c), but a restore's COPY of timers may have committed since:
	 * if this statement sees such timers, the restoring session registered
	 * before its COPY, so it shows now.  Materialise nothing then: the
	 * restore's tasks, with the same ids and occurrences, are still to come.
	 */
	if (ntimers > 0 && jf_am_worker && jf_restore_in_progress())
	{
		SPI_finish();
		return (Datum) 0;
	}

	insert_plan = SPI_prepare(
		"INSERT INTO jobflow.tasks"
		"  (url, method, headers, body, content_type, timeout_ms, max_attempts,"
		"   queue, owner, run_at, cron_id, cron_at)"
		" SELECT c.url, c.method, c.headers, c.body, c.content_type, c.timeout_ms,"
		"        c.max_attempts, c.queue, c.owner, o.run_at, c.id, o.cron_at"
		"   FROM jobflow.cron_timers c,"
		"        ROWS FROM (pg_catalog.unnest($2::timestamptz[]),"
		"                   pg_catalog.unnest($3::timestamptz[])) AS o(run_at, cron_at)"
		"  WHERE c.id = $1"
		" ON CONFLICT (cron_id, cron_at)"
		"   WHERE cron_id IS NOT NULL AND state <> 'cancelled' DO NOTHING"
		" RETURNING id, run_at",
		3, insert_types);
	update_plan = SPI_prepare(
		"UPDATE jobflow.cron_timers SET next_at = $2 WHERE id = $1",
		2, update_types);
	if (insert_plan == NULL || update_plan == NULL)
		elog(ERROR, "preparing cron statements failed: %s",
			 SPI_result_code_string(SPI_result));

	o.run_at = palloc(sizeof(Datum) * (CRON_MAX_PER_CALL + 1));
	o.cron_at = palloc(sizeof(Datum) * (CRON_MAX_PER_CALL + 1));

	for (i = 0; i < ntimers; i++)
	{
		HeapTuple	tup = timers->vals[i];
		TupleDesc	desc = timers->tupdesc;
		bool		isnull;
		int64		id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		char	   *schedule = SPI_getvalue(tup, desc, 2);
		char	   *zone = SPI_getvalue(tup, desc, 3);
		TimestampTz next_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 4, &isnull));
		bool		once = DatumGetBool(SPI_getbinval(tup, desc, 5, &isnull));
		TimestampTz first_missed = DT_NOEND;
		TimestampTz next = 0;
		bool		more;
		JfCronSchedule s;
		pg_tz	   *tz;
		Datum		args[3];
		char		nulls[2] = {' ', ' '};
		int			k;

		/* stored timers were valid; one that no longer is must not stop the rest */
		tz = pg_tzset(zone);
		if (!jf_cron_parse(schedule, &s, NULL) || tz == NULL)
		{
			ereport(WARNING,
					(errmsg("jobflow cron timer %lld has an invalid schedule or time zone; skipped",
							(long long) id)));
			continue;
		}
		if (next_at < missed_before)
			first_missed = next_at;
		for (k = 0; k < nstale; k++)
		{
			if (stale_ids[k] == id && stale_at[k] < first_missed)
				first_missed = stale_at[k];
		}

		o.n = 0;
		more = plan_timer(&s, tz, next_at, first_missed, once, now, until, &o, &next);
		if (o.n > 0)
		{
			uint64		j;

			args[0] = Int64GetDatum(id);
			args[1] = timestamp_array(o.run_at, o.n);
			args[2] = timestamp_array(o.cron_at, o.n);
			ret = SPI_execute_plan(insert_plan, args, NULL, false, 0);
			if (ret != SPI_OK_INSERT_RETURNING)
				elog(ERROR, "materialising cron timer %lld failed: %s",
					 (long long) id, SPI_result_code_string(ret));
			for (j = 0; j < SPI_processed; j++)
			{
				Datum		values[2];
				bool		rnulls[2] = {false, false};

				values[0] = SPI_getbinval(SPI_tuptable->vals[j], SPI_tuptable->tupdesc, 1, &isnull);
				values[1] = SPI_getbinval(SPI_tuptable->vals[j], SPI_tuptable->tupdesc, 2, &isnull);
				tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, rnulls);
			}
			SPI_freetuptable(SPI_tuptable);
		}
		if (more && next == next_at)
			continue;
		args[0] = Int64GetDatum(id);
		args[1] = TimestampTzGetDatum(next);
		if (!more)
			nulls[1] = 'n';
		ret = SPI_execute_plan(update_plan, args, nulls, false, 0);
		if (ret != SPI_OK_UPDATE)
			elog(ERROR, "advancing cron timer %lld failed: %s",
				 (long long) id, SPI_result_code_string(ret));
	}

	SPI_finish();
	return (Datum) 0;
}

