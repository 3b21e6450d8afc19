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
 * Redriving a failed or cancelled task (retry, retry_failed) works the
 * same way: tenants may update pending rows only, so the caller's right to
 * the task is checked under row-level security and the update is made as
 * the table's owner.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/catalog.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "api/tenant_api.h"
#include "api/as_owner.h"

/*
 * Become the owner of jobflow.<relname>, in a restricted security context
 * and with search_path pinned to pg_catalog, pg_temp (see as_owner.h): the
 * statements that follow are planned as the owner, and an operator the
 * caller planted in a schema of its path would run as the owner.  An ERROR
 * aborts the (sub)transaction, which restores the caller and the setting;
 * jf_as_owner_end does it otherwise.
 */
void
jf_as_owner_begin(const char *relname, JfAsOwner *s)
{
	Oid			relid = RangeVarGetRelid(makeRangeVar("jobflow", (char *) relname, -1),
										 NoLock, false);
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	s->save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	GetUserIdAndSecContext(&s->save_userid, &s->save_sec_context);
	SetUserIdAndSecContext(owner, s->save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

void
jf_as_owner_end(const JfAsOwner *s)
{
	SetUserIdAndSecContext(s->save_userid, s->save_sec_context);
	AtEOXact_GUC(true, s->save_nestlevel);
}

/* the last owner jf_check_owner_role passed, while no role changed */
static Oid	owner_checked = InvalidOid;
static bool owner_callbacks = false;

static void
owner_check_forget(Datum arg, int cacheid, uint32 hashvalue)
{
	owner_checked = InvalidOid;
}

/*
 * A role every tenant holds cannot own anything of jobflow's: jobflow_user
 * (every application is a member), jobflow_monitor and jobflow_admin, the
 * predefined pg_* roles, and any role one of jobflow's roles is a member
 * of (its members hold it too).  Tasks owned by such a role would be every
 * tenant's to read (URL, headers), cancel and rewrite, its secrets every
 * tenant's to send, and it would be a second share of the worker for
 * whoever used it.  A group role an administrator made on purpose may own
 * tasks: its members share them, as they share its tables.
 */
void
jf_check_owner_role(Oid role)
{
	static const char *const shared[] = {"jobflow_user", "jobflow_monitor", "jobflow_admin"};
	const char *name;
	int			i;

	/*
	 * Every row of a bulk insert asks for the same owner: the answer holds
	 * until a role or a membership changes.
	 */
	if (role == owner_checked && OidIsValid(role))
		return;
	if (!owner_callbacks)
	{
		CacheRegisterSyscacheCallback(AUTHOID, owner_check_forget, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, owner_check_forget, (Datum) 0);
		owner_callbacks = true;
	}
	name = GetUserNameFromId(role, true);

	if (name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role with OID %u does not exist", role)));
	if (IsReservedName(name))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("predefined role \"%s\" cannot own jobflow tasks, timers, secrets or queues", name),
				 errhint("Schedule as the application's own role.")));
	for (i = 0; i < lengthof(shared); i++)
	{
		Oid			s = get_role_oid(shared[i], true);

		if (!OidIsValid(s) || !(s == role || is_member_of_role_nosuper(s, role)))
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" cannot own jobflow tasks, timers, secrets or queues", name),
				 s == role ?
				 errdetail("Every tenant holds role \"%s\": what it owned would be every tenant's to see and change.", name) :
				 errdetail("Role \"%s\" is a member of it, so every tenant holds it: what it owned would be every tenant's to see and change.", shared[i]),
				 errhint("Schedule as the application's own role (RESET ROLE, or SET ROLE to a role of the application).")));
	}
	owner_checked = role;
}

/*
 * The role on whose behalf the caller acts (argument argno, the caller when
 * NULL): itself, a role whose privileges it has, or any role for members of
 * jobflow_admin; what is said when it may not, "permission denied to
 * <action> role ...".
 */
Oid
jf_managed_role(FunctionCallInfo fcinfo, int argno, const char *action)
{
	Oid			me = GetUserId();
	Oid			role = PG_ARGISNULL(argno) ? me : PG_GETARG_OID(argno);
	Oid			admin = get_role_oid("jobflow_admin", true);

	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role with OID %u does not exist", role)));
	if (!has_privs_of_role(me, role) &&
		!(OidIsValid(admin) && has_privs_of_role(me, admin)))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to %s role \"%s\"", action,
						GetUserNameFromId(role, false)),
				 errdetail("Only the role itself, roles that have its privileges and members of jobflow_admin may.")));
	return role;
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
	JfAsOwner	as_owner;
	int			save_nestlevel;
	bool		found;


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
		jf_as_owner_begin("cron_timers", &as_owner);
		if (SPI_execute_with_args("UPDATE jobflow.tasks"
								  "   SET state = 'cancelled'::jobflow.task_state"
								  " WHERE cron_id OPERATOR(pg_catalog.=) $1"
								  "   AND state OPERATOR(pg_catalog.=) 'pending'::jobflow.task_state",
								  1, types, values, NULL, false, 0) != SPI_OK_UPDATE ||
			SPI_execute_with_args("DELETE FROM jobflow.cron_timers"
								  " WHERE id OPERATOR(pg_catalog.=) $1",
								  1, types, values, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not delete the cron timer");
		jf_as_owner_end(&as_owner);
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
	JfAsOwner	as_owner;
	bool		found;
	int			i;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	for (i = 0; i < 11; i++)
	{
		values[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/* as the caller: row-level security decides which tasks it may change */
	if (SPI_execute_with_args("SELECT 1 FROM jobflow.tasks"
							  " WHERE id OPERATOR(pg_catalog.=) $1"
							  "   AND state OPERATOR(pg_catalog.=) 'pending' FOR UPDATE",
							  1, types, values, nulls, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not check the task");
	found = SPI_processed > 0;

	if (found)
	{
		jf_as_owner_begin("tasks", &as_owner);
		if (SPI_execute_with_args("UPDATE jobflow.tasks SET url = $2, run_at = $3,"
								  " body = $4, content_type = $5, headers = $6,"
								  " method = $7, timeout_ms = $8, max_attempts = $9,"
								  " queue = $10, body_bytes = $11, updated_at = pg_catalog.now()"
								  " WHERE id OPERATOR(pg_catalog.=) $1"
								  "   AND state OPERATOR(pg_catalog.=) 'pending'",
								  11, types, values, nulls, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not replace the task");
		found = SPI_processed > 0;
		jf_as_owner_end(&as_owner);
	}
	SPI_finish();
	PG_RETURN_BOOL(found);
}

/*
 * Run an UPDATE of jobflow.tasks as the table's owner, past row-level
 * security (which lets tenants update pending rows only), after the
 * caller's right to the rows has been checked under it.  The restricted
 * security context keeps the owner's rights to this one statement.
 */
static uint64
update_tasks_as_owner(const char *sql, int nargs, Oid *types, Datum *values,
					  const char *nulls)
{
	JfAsOwner	as_owner;
	uint64		n;

	jf_as_owner_begin("tasks", &as_owner);
	if (SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not retry tasks");
	n = SPI_processed;
	jf_as_owner_end(&as_owner);
	return n;
}

/* The run_at rules of reschedule(), for a redrive at a given time. */
static void
check_retry_time(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("run_at must not be null"),
				 errhint("Give the time the task should run at; now() runs it at once.")));
	if (TIMESTAMP_NOT_FINITE(PG_GETARG_TIMESTAMPTZ(argno)))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_FIELD_OVERFLOW),
				 errmsg("run_at must be a finite timestamp")));
}

/*
 * jobflow.retry(id bigint, run_at timestamptz DEFAULT now()) RETURNS
 * boolean: a failed or cancelled task the caller may see (its own, one of
 * a role it has the privileges of, or any for jobflow_admin) goes back to
 * pending, due at run_at.  The row trigger gives it a fresh attempt
 * budget and announces it to the worker at commit.  False when there was
 * no such task (unknown, someone else's, pending, running or succeeded).
 */
PG_FUNCTION_INFO_V1(jobflow_retry);
Datum
jobflow_retry(PG_FUNCTION_ARGS)
{
	Oid			types[2] = {INT8OID, TIMESTAMPTZOID};
	Datum		values[2];
	bool		found;

	check_retry_time(fcinfo, 1);
	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* as the caller: row-level security decides which tasks it may see */
	if (SPI_execute_with_args("SELECT 1 FROM jobflow.tasks"
							  " WHERE id OPERATOR(pg_catalog.=) $1"
							  "   AND state OPERATOR(pg_catalog.=) ANY ('{failed,cancelled}')",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not check the task");
	found = SPI_processed > 0;
	if (found)
		found = update_tasks_as_owner("UPDATE jobflow.tasks SET state = 'pending', run_at = $2"
									  " WHERE id OPERATOR(pg_catalog.=) $1"
									  "   AND state OPERATOR(pg_catalog.=) ANY ('{failed,cancelled}')",
									  2, types, values, NULL) > 0;
	SPI_finish();
	PG_RETURN_BOOL(found);
}

/*
 * jobflow.retry_failed(queue text DEFAULT NULL, since timestamptz DEFAULT
 * NULL) RETURNS bigint: every failed task the caller may see, of one queue
 * or all, failed at or after since (or ever), goes back to pending, due
 * now; returns how many.  Cancelled tasks stay: cancelling was a decision,
 * failing was not.
 */
PG_FUNCTION_INFO_V1(jobflow_retry_failed);
Datum
jobflow_retry_failed(PG_FUNCTION_ARGS)
{
	Oid			types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		values[2];
	char		nulls[2];
	Oid			idtypes[1] = {INT8ARRAYOID};
	Datum		ids[1];
	bool		isnull;
	uint64		n = 0;

	values[0] = PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0);
	nulls[0] = PG_ARGISNULL(0) ? 'n' : ' ';
	values[1] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	nulls[1] = PG_ARGISNULL(1) ? 'n' : ' ';

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* as the caller: row-level security decides which tasks it may see */
	if (SPI_execute_with_args("SELECT pg_catalog.array_agg(id) FROM jobflow.tasks"
							  " WHERE state OPERATOR(pg_catalog.=) 'failed'"
							  "   AND ($1 IS NULL OR queue OPERATOR(pg_catalog.=) $1)"
							  "   AND ($2 IS NULL OR updated_at OPERATOR(pg_catalog.>=) $2)",
							  2, types, values, nulls, true, 0) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not look for failed tasks");
	ids[0] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
		n = update_tasks_as_owner("UPDATE jobflow.tasks SET state = 'pending',"
								  " run_at = pg_catalog.now()"
								  " WHERE id OPERATOR(pg_catalog.=) ANY ($1)"
								  "   AND state OPERATOR(pg_catalog.=) 'failed'",
								  1, idtypes, ids, NULL);
	SPI_finish();
	PG_RETURN_INT64((int64) n);
}
