/*-------------------------------------------------------------------------
 *
 * queues.c
 *	  The SQL functions that configure queues: pause_queue(),
 *	  resume_queue(), set_queue(), drop_queue() and
 *	  set_queue_client_certificate().
 *
 * A queue is named per owner (jobflow.tasks.queue); a row of
 * jobflow.queues pauses it, limits it (requests in flight, a dispatch
 * rate), gives it a priority, a retention and what of its attempts is
 * logged.  Tenants may read their own rows only and write none: these
 * functions check the caller, who may
 * configure its own queues (or, for members of jobflow_admin and
 * superusers, any owner's), and write as the table's owner (as_owner.h).
 * Each role may configure at most jobflow.max_queues_per_role queues
 * (quota.c).  The table's row trigger names the queues a transaction
 * changed for the worker (changes.c), which reads them again
 * (worker/queues.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "api/as_owner.h"
#include "api/client_certs.h"
#include "api/quota.h"
#include "api/task_check.h"
#include "api/tenant_api.h"
#include "base/settings.h"

#define MAX_CONCURRENT_LIMIT 1000000
#define PRIORITY_LIMIT 1000

/*
 * The owner of the queue a function acts on: the caller by default.
 * Naming another role takes jobflow_admin's privileges (superusers have
 * them): a tenant must not pause or limit another tenant's callbacks.
 */
static Oid
queue_owner(FunctionCallInfo fcinfo, int argno)
{
	Oid			me = GetUserId();
	Oid			role = PG_ARGISNULL(argno) ? me : PG_GETARG_OID(argno);
	Oid			admin;

	if (role == me)
		return role;
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role with OID %u does not exist", role)));
	admin = get_role_oid("jobflow_admin", true);
	if (!(OidIsValid(admin) && has_privs_of_role(me, admin)))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to configure the queues of role \"%s\"",
						GetUserNameFromId(role, false)),
				 errdetail("A role configures its own queues; only members of jobflow_admin and superusers may name another owner.")));
	return role;
}

/* The queue name argument, checked as a task's queue name is. */
static text *
queue_name(FunctionCallInfo fcinfo)
{
	text	   *name;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("queue name must not be null")));
	name = PG_GETARG_TEXT_PP(0);
	jf_check_queue_name(name);
	return name;
}

/*
 * Run one statement on jobflow.queues as its owner with (owner, name) as
 * $1 and $2 and the given further arguments; the number of rows it
 * changed.
 */
static uint64
write_queue(const char *sql, Oid owner, text *name, int nextra, Oid *extra_types,
			Datum *extra_values, char *extra_nulls)
{
	Oid			types[11] = {REGROLEOID, TEXTOID};
	Datum		values[11];
	char		nulls[11] = {' ', ' '};
	JfAsOwner	as_owner;
	uint64		n;
	int			ret;
	int			i;

	Assert(nextra <= 9);
	values[0] = ObjectIdGetDatum(owner);
	values[1] = PointerGetDatum(name);
	for (i = 0; i < nextra; i++)
	{
		types[2 + i] = extra_types[i];
		values[2 + i] = extra_values[i];
		nulls[2 + i] = extra_nulls[i];
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	jf_as_owner_begin("queues", &as_owner);
	ret = SPI_execute_with_args(sql, 2 + nextra, types, values, nulls, false, 0);
	if (ret < 0)
		elog(ERROR, "could not write jobflow.queues: %s", SPI_result_code_string(ret));
	n = SPI_processed;
	jf_as_owner_end(&as_owner);
	SPI_finish();
	return n;
}

/*
 * jobflow.pause_queue(name text, owner regrole) RETURNS boolean: the queue
 * fires nothing until resumed (its tasks stay pending); true when it was
 * not paused.  A queue nobody configured gets a row.
 */
PG_FUNCTION_INFO_V1(jobflow_pause_queue);
Datum
jobflow_pause_queue(PG_FUNCTION_ARGS)
{
	text	   *name = queue_name(fcinfo);
	Oid			owner = queue_owner(fcinfo, 1);

	jf_check_owner_role(owner);
	jf_quota_check(JF_QUOTA_QUEUES, owner, text_to_cstring(name));
	PG_RETURN_BOOL(write_queue("INSERT INTO jobflow.queues AS q (owner, name, paused)"
							   " VALUES ($1, $2, true)"
							   " ON CONFLICT (owner, name) DO UPDATE"
							   " SET paused = true, updated_at = pg_catalog.now()"
							   " WHERE NOT q.paused",
							   owner, name, 0, NULL, NULL, NULL) > 0);
}

/*
 * jobflow.resume_queue(name text, owner regrole) RETURNS boolean: a paused
 * queue fires again; true when it was paused.
 */
PG_FUNCTION_INFO_V1(jobflow_resume_queue);
Datum
jobflow_resume_queue(PG_FUNCTION_ARGS)
{
	text	   *name = queue_name(fcinfo);
	Oid			owner = queue_owner(fcinfo, 1);

	PG_RETURN_BOOL(write_queue("UPDATE jobflow.queues"
							   "   SET paused = false, updated_at = pg_catalog.now()"
							   " WHERE owner OPERATOR(pg_catalog.=) $1"
							   "   AND name OPERATOR(pg_catalog.=) $2 AND paused",
							   owner, name, 0, NULL, NULL, NULL) > 0);
}

/*
 * jobflow.set_queue(name, max_concurrent, max_per_second, priority,
 * retention, owner, log_attempts, max_concurrent_per_key,
 * max_per_second_per_key, ordered, dead_letter) RETURNS void: the queue's
 * whole configuration, each argument left out going back to its default
 * (no limit, priority 0, jobflow.retention, jobflow.log_attempts, no limit
 * per key, unordered, block); whether it is paused does not change.  An
 * ordered queue sends one task of a key at a time: a larger per-key cap
 * with it is refused rather than silently lowered.  The declaration of
 * 0.2.0, still in place until ALTER EXTENSION UPDATE, has no log_attempts
 * (nor the column) and nothing per key.
 */
PG_FUNCTION_INFO_V1(jobflow_set_queue);
Datum
jobflow_set_queue(PG_FUNCTION_ARGS)
{
	text	   *name = queue_name(fcinfo);
	Oid			owner = queue_owner(fcinfo, 5);
	Oid			types[9] = {INT4OID, FLOAT8OID, INT4OID, INTERVALOID, TEXTOID,
	INT4OID, FLOAT8OID, BOOLOID, TEXTOID};
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', 'n', 'n', 'n', ' ', ' '};
	bool		has_log = PG_NARGS() > 6;
	bool		has_flow = PG_NARGS() > 10;

	jf_check_owner_role(owner);
	if (!PG_ARGISNULL(1))
	{
		int32		max_concurrent = PG_GETARG_INT32(1);

		if (max_concurrent < 1 || max_concurrent > MAX_CONCURRENT_LIMIT)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("max_concurrent must be between 1 and %d", MAX_CONCURRENT_LIMIT),
					 errhint("NULL means no limit of the queue's own; pause_queue() stops it.")));
		values[0] = Int32GetDatum(max_concurrent);
	}
	else
		nulls[0] = 'n';
	if (!PG_ARGISNULL(2))
	{
		float8		rate = PG_GETARG_FLOAT8(2);

		if (isnan(rate) || rate < JF_MIN_RATE || rate > JF_MAX_RATE)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("max_per_second must be between %g and %g", JF_MIN_RATE, JF_MAX_RATE),
					 errhint("NULL means no limit; pause_queue() stops the queue.")));
		values[1] = Float8GetDatum(rate);
	}
	else
		nulls[1] = 'n';
	values[2] = Int32GetDatum(PG_ARGISNULL(3) ? 0 : PG_GETARG_INT32(3));
	if (DatumGetInt32(values[2]) < -PRIORITY_LIMIT || DatumGetInt32(values[2]) > PRIORITY_LIMIT)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("priority must be between %d and %d", -PRIORITY_LIMIT, PRIORITY_LIMIT)));
	if (!PG_ARGISNULL(4))
	{
		Interval   *retention = PG_GETARG_INTERVAL_P(4);
		Interval	zero;

		memset(&zero, 0, sizeof(zero));
		if (
#if PG_VERSION_NUM >= 170000
			INTERVAL_NOT_FINITE(retention) ||
#endif
			DatumGetInt32(DirectFunctionCall2(interval_cmp, IntervalPGetDatum(retention),
											  IntervalPGetDatum(&zero))) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("retention must be a finite interval, not negative"),
					 errhint("0 keeps the queue's finished tasks; NULL uses jobflow.retention.")));
		values[3] = IntervalPGetDatum(retention);
	}
	else
		nulls[3] = 'n';
	if (has_log && !PG_ARGISNULL(6))
	{
		char	   *log = text_to_cstring(PG_GETARG_TEXT_PP(6));

		if (strcmp(log, "all") != 0 && strcmp(log, "failures") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("log_attempts must be \"all\" or \"failures\""),
					 errhint("NULL uses jobflow.log_attempts.")));
		values[4] = CStringGetTextDatum(log);
		nulls[4] = ' ';
	}
	/* flow control per key (0.3.0): left out, none, unordered, block */
	values[7] = BoolGetDatum(has_flow && !PG_ARGISNULL(9) && PG_GETARG_BOOL(9));
	values[8] = CStringGetTextDatum("block");
	if (has_flow && !PG_ARGISNULL(7))
	{
		int32		cap = PG_GETARG_INT32(7);

		if (cap < 1 || cap > MAX_CONCURRENT_LIMIT)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("max_concurrent_per_key must be between 1 and %d", MAX_CONCURRENT_LIMIT),
					 errhint("NULL means no limit per flow key.")));
		/* ordered delivery is one at a time: a larger cap could not hold */
		if (cap > 1 && DatumGetBool(values[7]))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("an ordered queue sends one task of a flow key at a time"),
					 errhint("Leave max_concurrent_per_key out (or 1) with ordered => true.")));
		values[5] = Int32GetDatum(cap);
		nulls[5] = ' ';
	}
	if (has_flow && !PG_ARGISNULL(8))
	{
		float8		rate = PG_GETARG_FLOAT8(8);

		if (isnan(rate) || rate < JF_MIN_RATE || rate > JF_MAX_RATE)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("max_per_second_per_key must be between %g and %g", JF_MIN_RATE, JF_MAX_RATE),
					 errhint("NULL means no rate limit per flow key.")));
		values[6] = Float8GetDatum(rate);
		nulls[6] = ' ';
	}
	if (has_flow && !PG_ARGISNULL(10))
	{
		char	   *dead = text_to_cstring(PG_GETARG_TEXT_PP(10));

		if (strcmp(dead, "block") != 0 && strcmp(dead, "skip") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("dead_letter must be \"block\" or \"skip\""),
					 errhint("block: a flow key waits while its failed task is not redriven or cancelled; skip: it goes on.")));
		values[8] = CStringGetTextDatum(dead);
	}
	jf_quota_check(JF_QUOTA_QUEUES, owner, text_to_cstring(name));
	if (has_flow)
		(void) write_queue("INSERT INTO jobflow.queues AS q"
						   " (owner, name, max_concurrent, max_per_second, priority, retention,"
						   "  log_attempts, max_concurrent_per_key, max_per_second_per_key,"
						   "  ordered, dead_letter)"
						   " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
						   " ON CONFLICT (owner, name) DO UPDATE"
						   " SET max_concurrent = excluded.max_concurrent,"
						   "     max_per_second = excluded.max_per_second,"
						   "     priority = excluded.priority, retention = excluded.retention,"
						   "     log_attempts = excluded.log_attempts,"
						   "     max_concurrent_per_key = excluded.max_concurrent_per_key,"
						   "     max_per_second_per_key = excluded.max_per_second_per_key,"
						   "     ordered = excluded.ordered, dead_letter = excluded.dead_letter,"
						   "     updated_at = pg_catalog.now()",
						   owner, name, 9, types, values, nulls);
	else if (has_log)
		(void) write_queue("INSERT INTO jobflow.queues AS q"
						   " (owner, name, max_concurrent, max_per_second, priority, retention,"
						   "  log_attempts)"
						   " VALUES ($1, $2, $3, $4, $5, $6, $7)"
						   " ON CONFLICT (owner, name) DO UPDATE"
						   " SET max_concurrent = excluded.max_concurrent,"
						   "     max_per_second = excluded.max_per_second,"
						   "     priority = excluded.priority, retention = excluded.retention,"
						   "     log_attempts = excluded.log_attempts,"
						   "     updated_at = pg_catalog.now()",
						   owner, name, 5, types, values, nulls);
	else
		(void) write_queue("INSERT INTO jobflow.queues AS q"
						   " (owner, name, max_concurrent, max_per_second, priority, retention)"
						   " VALUES ($1, $2, $3, $4, $5, $6)"
						   " ON CONFLICT (owner, name) DO UPDATE"
						   " SET max_concurrent = excluded.max_concurrent,"
						   "     max_per_second = excluded.max_per_second,"
						   "     priority = excluded.priority, retention = excluded.retention,"
						   "     updated_at = pg_catalog.now()",
						   owner, name, 4, types, values, nulls);
	PG_RETURN_VOID();
}

/*
 * jobflow.set_queue_client_certificate(name text, certificate text, owner
 * regrole) RETURNS void: the client certificate (of the queue's owner)
 * the queue's tasks present for mutual TLS, to the origins it is bound
 * to; NULL: none.  Apart from set_queue(), whose arguments all go back to
 * their defaults when left out, so that neither call undoes the other.
 */
PG_FUNCTION_INFO_V1(jobflow_set_queue_client_certificate);
Datum
jobflow_set_queue_client_certificate(PG_FUNCTION_ARGS)
{
	text	   *name = queue_name(fcinfo);
	Oid			owner = queue_owner(fcinfo, 2);
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	char		nulls[1] = {' '};

	jf_check_owner_role(owner);
	if (PG_ARGISNULL(1))
	{
		(void) write_queue("UPDATE jobflow.queues SET client_certificate = NULL,"
						   "       updated_at = pg_catalog.now()"
						   " WHERE owner OPERATOR(pg_catalog.=) $1"
						   "   AND name OPERATOR(pg_catalog.=) $2"
						   "   AND client_certificate IS NOT NULL",
						   owner, name, 0, NULL, NULL, NULL);
		PG_RETURN_VOID();
	}
	/* a certificate of another role is as missing as one nobody has */
	jf_lock_client_certificate(owner, text_to_cstring(PG_GETARG_TEXT_PP(1)));
	values[0] = PointerGetDatum(PG_GETARG_TEXT_PP(1));
	jf_quota_check(JF_QUOTA_QUEUES, owner, text_to_cstring(name));
	(void) write_queue("INSERT INTO jobflow.queues AS q (owner, name, client_certificate)"
					   " VALUES ($1, $2, $3)"
					   " ON CONFLICT (owner, name) DO UPDATE"
					   " SET client_certificate = excluded.client_certificate,"
					   "     updated_at = pg_catalog.now()",
					   owner, name, 1, types, values, nulls);
	PG_RETURN_VOID();
}

/*
 * jobflow.drop_queue(name text, owner regrole) RETURNS boolean: the queue
 * goes back to no configuration (unpaused, unlimited); true when it had a
 * row.
 */
PG_FUNCTION_INFO_V1(jobflow_drop_queue);
Datum
jobflow_drop_queue(PG_FUNCTION_ARGS)
{
	text	   *name = queue_name(fcinfo);
	Oid			owner = queue_owner(fcinfo, 1);

	PG_RETURN_BOOL(write_queue("DELETE FROM jobflow.queues"
							   " WHERE owner OPERATOR(pg_catalog.=) $1"
							   "   AND name OPERATOR(pg_catalog.=) $2",
							   owner, name, 0, NULL, NULL, NULL) > 0);
}

