/*-------------------------------------------------------------------------
 *
 * cron_sql.c
 *	  Backend side of jobflow's cron timers: the row trigger of
 *	  jobflow.cron_timers, jobflow.cron_next() and the materialiser the
 *	  worker calls to turn occurrences into ordinary tasks.
 *
 * Parsing and next-occurrence arithmetic live in the plain-C cron.c; this
 * file plugs PostgreSQL's own time-zone library into it (pg_tzset() for
 * the name, pg_next_dst_boundary() for the offsets), so timers follow the
 * server's tzdata and never the process's TZ.
 *
 * Occurrences become tasks ahead of time, and each timer's next_at is the
 * first occurrence not yet materialised: the next one is always computed
 * from the schedule, never from when the previous one fired, so nothing
 * drifts.  The unique index on (cron_id, cron_at) of live tasks and
 * ON CONFLICT DO NOTHING make materialising an occurrence twice harmless;
 * FOR UPDATE SKIP LOCKED keeps two callers from working on one timer.
 *
 *-------------------------------------------------------------------------
 */
#include "jobflow.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "pgtime.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/cron.h"
#include "worker/guard.h"
#include "api/quota.h"
#include "api/task_check.h"

#define CRON_NAME_MAX		200
/* an occurrence later than this is "missed" and follows the timer's policy */
#define CRON_GRACE_US		(5 * USECS_PER_SEC)

TimestampTz jobflow_cron_missed_before = 0;

/*
 * The timers the worker's next materialisation looks at, when it names
 * them (jf_cron_only): those whose rows committed transactions changed.
 */
static const int64 *only_ids = NULL;
static int	nonly = 0;
/* occurrences one timer may add in one call: bounds a per-second timer */
#define CRON_MAX_PER_CALL	10000

/* Seconds between the Unix epoch and PostgreSQL's (2000-01-01). */
#define CRON_EPOCH_DIFF_S \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY)

static const char *const cron_syntax_hint =
"A schedule is 5 or 6 cron fields ([second] minute hour day-of-month month day-of-week), "
"a macro such as @hourly, or an interval such as \"every 10 seconds\".";

/*
 * The JfCronZone callback over pg_tz.  pg_next_dst_boundary reports every
 * transition of the zone (not only isdst changes), strictly after t;
 * anything else is refused rather than trusted.
 */
static bool
pgtz_lookup(void *arg, int64_t utc_sec, int32_t *gmtoff, int64_t *next_change,
			int32_t *next_gmtoff)
{
	pg_time_t	t = (pg_time_t) utc_sec;
	long		before_off;
	long		after_off;
	int			before_dst;
	int			after_dst;
	pg_time_t	boundary;
	int			r;

	r = pg_next_dst_boundary(&t, &before_off, &before_dst, &boundary,
							 &after_off, &after_dst, (const pg_tz *) arg);
	if (r < 0)
		return false;
	*gmtoff = (int32_t) before_off;
	if (r == 0)
	{
		*next_change = JF_CRON_NEVER;
		*next_gmtoff = (int32_t) before_off;
		return true;
	}
	if (boundary <= t)
		return false;
	*next_change = boundary;
	*next_gmtoff = (int32_t) after_off;
	return true;
}

/*
 * Parse or fail with the parser's message and where the problem is.
 * errposition() points into the query text, not into a string argument,
 * so the character number goes in the detail.
 */
static void
parse_schedule(const char *expr, JfCronSchedule *s)
{
	JfCronError err;

	if (jf_cron_parse(expr, s, &err))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid cron schedule: %s", err.message),
			 errdetail("The error is at character %d of the schedule.",
					   pg_mbstrlen_with_len(expr, err.position) + 1),
			 errhint("%s", cron_syntax_hint)));
}

/* A zone name is echoed only when it cannot carry odd bytes into the log. */
static bool
printable_name(const char *name)
{
	const char *p;

	if (strlen(name) > 64)
		return false;
	for (p = name; *p; p++)
	{
		if ((unsigned char) *p < 0x20 || (unsigned char) *p >= 0x7f)
			return false;
	}
	return true;
}

/*
 * PostgreSQL's zone of that name, as SET TIME ZONE would find it.  Leap
 * second zones are refused as the server refuses them for timezone.  So
 * are zones whose offset from UTC is a day or more: a POSIX rule such as
 * "<+99>-99" parses, but no wall clock of it maps to an instant the walk
 * in cron.c accepts, so a timer in it would never fire.
 */
static pg_tz *
lookup_zone(const char *name)
{
	pg_tz	   *tz = pg_tzset(name);
	int32_t		off;
	int32_t		next_off;
	int64_t		next_change;

	if (tz == NULL || !pg_tz_acceptable(tz))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 printable_name(name) ?
				 errmsg("time zone \"%s\" not recognized", name) :
				 errmsg("time zone not recognized"),
				 errhint("Use a name from pg_timezone_names, for example \"Europe/Paris\" or \"UTC\".")));
	if (!pgtz_lookup(tz, (int64_t) time(NULL), &off, &next_change, &next_off) ||
		off <= -SECS_PER_DAY || off >= SECS_PER_DAY ||
		next_off <= -SECS_PER_DAY || next_off >= SECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 printable_name(name) ?
				 errmsg("time zone \"%s\" has an offset from UTC of a day or more", name) :
				 errmsg("time zone has an offset from UTC of a day or more"),
				 errdetail("No wall-clock time of such a zone can be scheduled."),
				 errhint("Use a name from pg_timezone_names, for example \"Europe/Paris\" or \"UTC\".")));
	return tz;
}

/*
 * First occurrence strictly after "after", in whole seconds.  False when
 * there is none that a timestamptz can hold.
 */
static bool
next_occurrence(const JfCronSchedule *s, pg_tz *tz, TimestampTz after,
				TimestampTz *next)
{
	JfCronZone	zone = {pgtz_lookup, tz};
	int64		sec;
	int64_t		next_sec;

	if (TIMESTAMP_NOT_FINITE(after))
		return false;
	/* floor division: the second that contains "after" */
	sec = after / USECS_PER_SEC;
	if (after < 0 && sec * USECS_PER_SEC != after)
		sec--;
	sec += CRON_EPOCH_DIFF_S;
	if (sec < JF_CRON_MIN_TIME || sec > JF_CRON_MAX_TIME)
		return false;
	if (!jf_cron_next(s, &zone, sec, &next_sec))
		return false;
	*next = (TimestampTz) (next_sec - CRON_EPOCH_DIFF_S) * USECS_PER_SEC;
	return true;
}

PG_FUNCTION_INFO_V1(jobflow_cron_next);
Datum
jobflow_cron_next(PG_FUNCTION_ARGS)
{
	char	   *expr = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *zone = text_to_cstring(PG_GETARG_TEXT_PP(1));
	TimestampTz after = PG_GETARG_TIMESTAMPTZ(2);
	JfCronSchedule s;
	pg_tz	   *tz;
	TimestampTz next;

	parse_schedule(expr, &s);
	tz = lookup_zone(zone);
	if (!next_occurrence(&s, tz, after, &next))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(next);
}

static int
attnum_of(TupleDesc desc, const char *name)
{
	int			attnum = SPI_fnumber(desc, name);

	if (attnum <= 0)
		elog(ERROR, "jobflow.cron_timers has no column \"%s\"", name);
	return attnum;
}

static char *
text_column(HeapTuple tuple, TupleDesc desc, int attnum, const char *what)
{
	bool		isnull;
	Datum		d = heap_getattr(tuple, attnum, desc, &isnull);

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	return TextDatumGetCString(d);
}

static void
check_name(const char *name)
{
	const char *p;
	size_t		len = strlen(name);

	if (len == 0 || len > CRON_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cron timer name must have 1 to %d bytes", CRON_NAME_MAX)));
	for (p = name; *p; p++)
	{
		if ((unsigned char) *p < 0x20 || (unsigned char) *p == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cron timer name contains a control character")));
	}
}

/*
 * Row trigger of jobflow.cron_timers.  A timer is validated with the very
 * checks its tasks will meet, plus its own fields, so the materialiser
 * (which inserts with triggers off in the worker) never makes a bad task.
 * next_at restarts from now whenever the row is written by anyone but the
 * materialiser, which is recognised by its setting next_at itself: users
 * may not write that column.
 */
PG_FUNCTION_INFO_V1(jobflow_cron_check);
Datum
jobflow_cron_check(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	tuple;
	bool		is_insert;
	Datum	   *repl;
	bool	   *repl_null;
	bool	   *replace;
	bool		isnull;
	bool		active;
	char	   *schedule;
	char	   *missed;
	JfCronSchedule s;
	pg_tz	   *tz;
	int			next_col;
	int			tz_col;

	jobflow_require_trigger(fcinfo, "jobflow._cron_check", true, true, "cron_timers");

	desc = trigdata->tg_relation->rd_att;
	is_insert = TRIGGER_FIRED_BY_INSERT(trigdata->tg_event);
	tuple = is_insert ? trigdata->tg_trigtuple : trigdata->tg_newtuple;
	repl = palloc0(desc->natts * sizeof(Datum));
	repl_null = palloc0(desc->natts * sizeof(bool));
	replace = palloc0(desc->natts * sizeof(bool));

	check_name(text_column(tuple, desc, attnum_of(desc, "name"), "cron timer name"));

	schedule = text_column(tuple, desc, attnum_of(desc, "schedule"), "cron schedule");
	parse_schedule(schedule, &s);

	tz_col = attnum_of(desc, "timezone");
	tz = lookup_zone(text_column(tuple, desc, tz_col, "time zone"));
	repl[tz_col - 1] = CStringGetTextDatum(pg_get_timezone_name(tz));
	replace[tz_col - 1] = true;

	missed = text_column(tuple, desc, attnum_of(desc, "missed"), "missed");
	if (strcmp(missed, "skip") != 0 && strcmp(missed, "once") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("missed must be \"skip\" or \"once\""),
				 errdetail("It says what happens to occurrences missed while the worker was not running: skip them, or fire once.")));

	jobflow_check_request_row(tuple, desc, is_insert, repl, repl_null, replace);

	/* a new timer counts against its owner's limit (quota.c) */
	if (is_insert)
	{
		int			owner_col = attnum_of(desc, "owner");
		Datum		owner = replace[owner_col - 1] ? repl[owner_col - 1] :
			heap_getattr(tuple, owner_col, desc, &isnull);

		jf_quota_check(JF_QUOTA_TIMERS, DatumGetObjectId(owner),
					   text_column(tuple, desc, attnum_of(desc, "name"), "cron timer name"));
	}

	active = DatumGetBool(heap_getattr(tuple, attnum_of(desc, "active"), desc, &isnull));
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", "active")));

	next_col = attnum_of(desc, "next_at");
	replace[next_col - 1] = true;
	if (!active)
		repl_null[next_col - 1] = true;
	else
	{
		bool		old_null = true;
		bool		new_null;
		Datum		old_next = 0;
		Datum		new_next = heap_getattr(tuple, next_col, desc, &new_null);
		TimestampTz next;

		if (!is_insert)
			old_next = heap_getattr(trigdata->tg_trigtuple, next_col, desc, &old_null);
		if (!is_insert && (old_null != new_null ||
						   (!new_null && DatumGetTimestampTz(old_next) !=
							DatumGetTimestampTz(new_next))))
			replace[next_col - 1] = false;	/* the materialiser moved it */
		else if (next_occurrence(&s, tz, GetCurrentTimestamp(), &next))
			repl[next_col - 1] = TimestampTzGetDatum(next);
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cron schedule has no occurrence after now in time zone \"%s\"",
							pg_get_timezone_name(tz)),
					 errdetail("An active timer must fire; this one never would."),
					 errhint("Check the schedule and the time zone, or create the timer inactive.")));
	}

	if (!is_insert)
	{
		int			upd_col = attnum_of(desc, "updated_at");

		repl[upd_col - 1] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		replace[upd_col - 1] = true;
	}

	return PointerGetDatum(heap_modify_tuple(tuple, desc, repl, repl_null, replace));
}

/* Occurrences to create for one timer, and their task times. */
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
		if (!next_occurrence(s, tz, now, &t))
			return false;
	}
	while (t < until && o->n < CRON_MAX_PER_CALL)
	{
		add_occurrence(o, t, t);
		if (!next_occurrence(s, tz, t, &t))
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

	InitMaterializedSRF(fcinfo, 0);
	if (TIMESTAMP_NOT_FINITE(until))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("until must be a finite timestamp")));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	if (jobflow_cron_missed_before != 0 && jobflow_cron_missed_before < missed_before)
		missed_before = jobflow_cron_missed_before;
	restricted = jobflow_am_worker && only_ids != NULL;
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
	 * (guard.c), but a restore's COPY of timers may have committed since:
	 * if this statement sees such timers, the restoring session registered
	 * before its COPY, so it shows now.  Materialise nothing then: the
	 * restore's tasks, with the same ids and occurrences, are still to come.
	 */
	if (ntimers > 0 && jobflow_am_worker && jf_guard_restore_in_progress())
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
