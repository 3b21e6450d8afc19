/*-------------------------------------------------------------------------
 *
 * cron.c
 *	  The SQL side of jobflow's cron timers: the row trigger of
 *	  jobflow.cron_timers (every timer that enters the table is checked and
 *	  gets its next occurrence) and jobflow.cron_next().
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
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "api/cron.h"
#include "api/quota.h"
#include "api/task_check.h"
#include "api/triggers.h"
#include "base/cron_zone.h"

#define CRON_NAME_MAX		200

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

