/*-------------------------------------------------------------------------
 *
 * tenant_api.c
 *	  What the API lets a tenant do that its grants alone do not.
 *
 * Tenants get no table-level DELETE on jobflow's tables: with it, LOCK
 * TABLE ... IN ACCESS EXCLUSIVE MODE is theirs too (directly, or through a
 * view of their own), and one open transaction would stop the worker for
 * everyone.  Removing a timer therefore goes through this function, which
 * checks as the caller, under row-level security, that the caller may
 * change the timer, and only then deletes it as the table's owner.
 * Replacing the request of a keyed task (schedule(..., on_duplicate =>
 * 'replace')) works the same way: tenants may update only a task's state
 * and run_at themselves.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/guc.h"
#include "utils/syscache.h"

#include "jobflow.h"

static Oid
relation_owner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * jobflow._delete_cron_timer(id bigint) RETURNS boolean: true when the
 * caller's timer (or one it may manage) was deleted, with its pending
 * occurrences cancelled.  The timer row stays locked from the check to
 * the delete, so nothing can change hands in between.
 */
PG_FUNCTION_INFO_V1(jobflow_delete_cron_timer);
Datum
jobflow_delete_cron_timer(PG_FUNCTION_ARGS)
{
	int64		id = PG_GETARG_INT64(0);
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(id)};
	Oid			table;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	bool		found;

	table = RangeVarGetRelid(makeRangeVar("jobflow", "cron_timers", -1), NoLock, false);

	/*
	 * Every name and operator below resolves in pg_catalog only: the caller
	 * chooses the search_path, and an operator of its own must never run
	 * with the owner's rights.
	 */
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/* as the caller: row-level security decides which timers it may change */
	if (SPI_execute_with_args("SELECT 1 FROM jobflow.cron_timers"
							  " WHERE id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not check the cron timer");
	found = SPI_processed > 0;

	if (found)
	{
		GetUserIdAndSecContext(&save_userid, &save_sec_context);
		SetUserIdAndSecContext(relation_owner(table),
							   save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		/* an error aborts the transaction, which restores the user */
		if (SPI_execute_with_args("UPDATE jobflow.tasks"
								  "   SET state = 'cancelled'::jobflow.task_state"
								  " WHERE cron_id OPERATOR(pg_catalog.=) $1"
								  "   AND state OPERATOR(pg_catalog.=) 'pending'::jobflow.task_state",
								  1, types, values, NULL, false, 0) != SPI_OK_UPDATE ||
			SPI_execute_with_args("DELETE FROM jobflow.cron_timers"
								  " WHERE id OPERATOR(pg_catalog.=) $1",
								  1, types, values, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not delete the cron timer");
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	SPI_finish();
	AtEOXact_GUC(true, save_nestlevel);
	PG_RETURN_BOOL(found);
}

/*
 * jobflow._replace_task(id, url, run_at, body, content_type, headers,
 * method, timeout_ms, max_attempts, queue, body_bytes) RETURNS boolean: for
 * schedule(..., on_duplicate => 'replace').  Tenants may update only the
 * state and run_at of their tasks; this function locks the task as the
 * caller, under row-level security (which lets a role lock only pending
 * tasks it may change), and only then writes the new request as the
 * table's owner.  The row trigger checks the request as on an insert.
 * False when the task is no longer pending (or not the caller's).
 */
PG_FUNCTION_INFO_V1(jobflow_replace_task);
Datum
jobflow_replace_task(PG_FUNCTION_ARGS)
{
	Oid			types[11] = {INT8OID, TEXTOID, TIMESTAMPTZOID, TEXTOID, TEXTOID,
	JSONBOID, TEXTOID, INT4OID, INT4OID, TEXTOID, BYTEAOID};
	Datum		values[11];
	char		nulls[11];
	Oid			table;
	Oid			save_userid;
	int			save_sec_context;
	bool		found;
	int			i;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	for (i = 0; i < 11; i++)
	{
		values[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
	}

	table = RangeVarGetRelid(makeRangeVar("jobflow", "tasks", -1), NoLock, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/* as the caller: row-level security decides which tasks it may change */
	if (SPI_execute_with_args("SELECT 1 FROM jobflow.tasks"
							  " WHERE id = $1 AND state = 'pending' FOR UPDATE",
							  1, types, values, nulls, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not check the task");
	found = SPI_processed > 0;

	if (found)
	{
		GetUserIdAndSecContext(&save_userid, &save_sec_context);
		SetUserIdAndSecContext(relation_owner(table),
							   save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		/* an error aborts the transaction, which restores the user */
		if (SPI_execute_with_args("UPDATE jobflow.tasks SET url = $2, run_at = $3,"
								  " body = $4, content_type = $5, headers = $6,"
								  " method = $7, timeout_ms = $8, max_attempts = $9,"
								  " queue = $10, body_bytes = $11, updated_at = pg_catalog.now()"
								  " WHERE id = $1 AND state = 'pending'",
								  11, types, values, nulls, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not replace the task");
		found = SPI_processed > 0;
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	SPI_finish();
	PG_RETURN_BOOL(found);
}
