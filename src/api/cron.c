/*-------------------------------------------------------------------------
 *
 * cron.c
 *	  The SQL side of jobflow's cron timers: the row trigger of
 *	  jobflow.cron_timers (every timer that enters the table is checked and
 *	  gets its next occurrence), jobflow.cron_next(), jobflow.cron_preview()
 *	  and jobflow.run_cron_now().
 *
 * Occurrences become tasks ahead of time, by the worker's materialiser
 * (worker/cron.c), and each timer's next_at is the first occurrence not
 * yet materialised: the next one is always computed from the schedule,
 * never from when the previous one fired, so nothing drifts.  Each role
 * may have at most jobflow.max_timers_per_role timers (quota.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "api/as_owner.h"
#include "api/cron.h"
#include "api/quota.h"
#include "api/task_check.h"
#include "api/triggers.h"
#include "base/compat.h"
#include "base/cron_zone.h"

#define CRON_NAME_MAX		200
/* how many occurrences cron_preview() lists at most */
#define CRON_PREVIEW_MAX	1000

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

	jf_cron_parse_sql(expr, &s);
	tz = jf_cron_lookup_zone(zone);
	if (!jf_cron_next_occurrence(&s, tz, after, &next))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(next);
}

/*
 * The local wall time of an instant in a zone, as the clock there will
 * show it: "2026-03-29 03:30:00+02:00 CEST".  The offset is given with
 * the abbreviation because abbreviations repeat (and some zones have none
 * but the offset itself).
 */
static char *
local_wall_time(TimestampTz t, pg_tz *tz)
{
	struct pg_tm tm;
	fsec_t		fsec;
	int			tzoff;
	const char *tzn = NULL;
	int			east;
	StringInfoData buf;

	if (timestamp2tm(t, &tzoff, &tm, &fsec, &tzn, tz) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	east = -tzoff;
	initStringInfo(&buf);
	appendStringInfo(&buf, "%04d-%02d-%02d %02d:%02d:%02d%c%02d:%02d",
					 tm.tm_year, tm.tm_mon, tm.tm_mday,
					 tm.tm_hour, tm.tm_min, tm.tm_sec,
					 east < 0 ? '-' : '+', abs(east) / SECS_PER_HOUR,
					 (abs(east) % SECS_PER_HOUR) / SECS_PER_MINUTE);
	if (abs(east) % SECS_PER_MINUTE != 0)
		appendStringInfo(&buf, ":%02d", abs(east) % SECS_PER_MINUTE);
	if (tzn != NULL && tzn[0] != '\0' && tzn[0] != '+' && tzn[0] != '-')
		appendStringInfo(&buf, " %s", tzn);
	return buf.data;
}

/*
 * jobflow.cron_preview(schedule, timezone, n, after) RETURNS TABLE (run_at
 * timestamptz, local_time text): the next n occurrences after a time, by the
 * very code the worker's materialiser uses (base/cron_zone.c), so that a
 * DST change shows as it will happen: a 02:30 daily schedule on a
 * spring-forward day in Europe/Berlin at 03:30 CEST.  Fewer rows when the
 * schedule ends.  Runs as the caller and reads no table.
 */
PG_FUNCTION_INFO_V1(jobflow_cron_preview);
Datum
jobflow_cron_preview(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	JfCronSchedule s;
	pg_tz	   *tz;
	TimestampTz t;
	int			n;
	int			i;

	for (i = 0; i < 4; i++)
	{
		static const char *const names[4] = {"schedule", "timezone", "n", "after"};

		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be null", names[i])));
	}
	n = PG_GETARG_INT32(2);
	t = PG_GETARG_TIMESTAMPTZ(3);
	if (TIMESTAMP_NOT_FINITE(t))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("after must be a finite timestamp")));
	if (n < 1 || n > CRON_PREVIEW_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("n must be between 1 and %d", CRON_PREVIEW_MAX)));
	jf_cron_parse_sql(text_to_cstring(PG_GETARG_TEXT_PP(0)), &s);
	tz = jf_cron_lookup_zone(text_to_cstring(PG_GETARG_TEXT_PP(1)));

	jf_init_materialized_srf(fcinfo);
	for (i = 0; i < n; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};

		if (!jf_cron_next_occurrence(&s, tz, t, &t))
			break;
		values[0] = TimestampTzGetDatum(t);
		values[1] = CStringGetTextDatum(local_wall_time(t, tz));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		CHECK_FOR_INTERRUPTS();
	}
	return (Datum) 0;
}

/*
 * jobflow.run_cron_now(name text) RETURNS bigint: one extra occurrence of
 * the caller's timer of that name, due now, as a task of the timer (its
 * cron_id, and the moment of the call as its cron_at), with the timer's
 * request as it is: URL, method, headers (secret references included),
 * body, queue, timeout and attempts; signed as every task of its owner.
 * The timer is found as unschedule_cron() finds it, among the caller's own
 * timers under row-level security, and locked until the end of the
 * transaction, so that it cannot change in between; another tenant's
 * timer is not found, with the very error of a name no timer has.  A
 * paused timer runs too: the call is explicit.  The task is made as the
 * owner of jobflow.tasks (tenants may not write cron_id), through the row
 * trigger's checks, and is announced to the worker at commit.  It is an
 * occurrence like the others: the timer's overlap policy applies to it and
 * to the occurrences after it.
 */
PG_FUNCTION_INFO_V1(jobflow_run_cron_now);
Datum
jobflow_run_cron_now(PG_FUNCTION_ARGS)
{
	Oid			types[1] = {INT8OID};
	Oid			name_types[1] = {TEXTOID};
	Datum		values[1];
	char	   *name;
	JfAsOwner	as_owner;
	bool		isnull;
	int64		timer_id;
	int64		task_id;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", "cron timer name")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	jf_check_cron_name(name);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/* as the caller: its own timers, under row-level security */
	values[0] = PG_GETARG_DATUM(0);
	if (SPI_execute_with_args("SELECT c.id FROM jobflow.cron_timers c"
							  " WHERE c.name OPERATOR(pg_catalog.=) $1"
							  "   AND c.owner OPERATOR(pg_catalog.=) jobflow._current_role()"
							  " FOR NO KEY UPDATE",
							  1, name_types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not look up the cron timer");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("cron timer \"%s\" does not exist", name),
				 errhint("Give the name of one of your own timers (see jobflow.cron).")));
	timer_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

	values[0] = Int64GetDatum(timer_id);
	jf_as_owner_begin("tasks", &as_owner);
	if (SPI_execute_with_args("INSERT INTO jobflow.tasks"
							  "  (url, method, headers, body, content_type, timeout_ms, max_attempts,"
							  "   queue, owner, run_at, cron_id, cron_at)"
							  " SELECT c.url, c.method, c.headers, c.body, c.content_type, c.timeout_ms,"
							  "        c.max_attempts, c.queue, c.owner, pg_catalog.now(), c.id,"
							  "        pg_catalog.clock_timestamp()"
							  "   FROM jobflow.cron_timers c WHERE c.id OPERATOR(pg_catalog.=) $1"
							  " RETURNING id",
							  1, types, values, NULL, false, 0) != SPI_OK_INSERT_RETURNING ||
		SPI_processed != 1)
		elog(ERROR, "could not make the occurrence of cron timer %lld", (long long) timer_id);
	task_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	jf_as_owner_end(&as_owner);
	SPI_finish();
	PG_RETURN_INT64(task_id);
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

void
jf_check_cron_name(const char *name)
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

	jf_require_trigger(fcinfo, "jobflow._cron_check", true, true, "cron_timers");

	desc = trigdata->tg_relation->rd_att;
	is_insert = TRIGGER_FIRED_BY_INSERT(trigdata->tg_event);
	tuple = is_insert ? trigdata->tg_trigtuple : trigdata->tg_newtuple;
	repl = palloc0(desc->natts * sizeof(Datum));
	repl_null = palloc0(desc->natts * sizeof(bool));
	replace = palloc0(desc->natts * sizeof(bool));

	jf_check_cron_name(text_column(tuple, desc, attnum_of(desc, "name"), "cron timer name"));

	schedule = text_column(tuple, desc, attnum_of(desc, "schedule"), "cron schedule");
	jf_cron_parse_sql(schedule, &s);

	tz_col = attnum_of(desc, "timezone");
	tz = jf_cron_lookup_zone(text_column(tuple, desc, tz_col, "time zone"));
	repl[tz_col - 1] = CStringGetTextDatum(pg_get_timezone_name(tz));
	replace[tz_col - 1] = true;

	missed = text_column(tuple, desc, attnum_of(desc, "missed"), "missed");
	if (strcmp(missed, "skip") != 0 && strcmp(missed, "once") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("missed must be \"skip\" or \"once\""),
				 errdetail("It says what happens to occurrences missed while the worker was not running: skip them, or fire once.")));

	/* from 0.3.0 (an update from an older version runs this before it adds it) */
	if (SPI_fnumber(desc, "overlap") > 0)
	{
		char	   *overlap = text_column(tuple, desc, attnum_of(desc, "overlap"), "overlap");

		if (strcmp(overlap, "allow") != 0 && strcmp(overlap, "skip") != 0 &&
			strcmp(overlap, "queue") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("overlap must be \"allow\", \"skip\" or \"queue\""),
					 errdetail("It says what happens to an occurrence that falls due while an earlier one of the timer is still pending or running: fire it anyway, skip it, or run it when the earlier one has finished.")));
	}

	jf_check_request_row(tuple, desc, is_insert, repl, repl_null, replace);

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
		else if (jf_cron_next_occurrence(&s, tz, GetCurrentTimestamp(), &next))
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

