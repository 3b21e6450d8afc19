/*-------------------------------------------------------------------------
 *
 * quota.c
 *	  Per-role limits on configured queues and cron timers.
 *
 * A queue or a timer is one cheap commit for a tenant and lasting work for
 * the worker (a row it reads, a timer it materialises for ever), so each
 * role may have at most jobflow.max_queues_per_role queues and
 * jobflow.max_timers_per_role timers; 0 lifts a limit.  They are checked
 * where rows are made: pause_queue() and set_queue() (queues.c), and the
 * row trigger of jobflow.cron_timers (cron.c), so a plain INSERT is
 * held to them too.  A restore brings back whatever it dumped (launcher/restore.c
 * knows a restoring session), and REASSIGN OWNED moves rows without
 * asking: both are the work of a superuser or the extension's owner.
 *
 * The check runs under a lock per (database, owner, kind), taken until the
 * transaction ends, and counts with a snapshot taken after the lock: two
 * transactions of one owner cannot both see the last place free, whatever
 * their isolation level.  The lock is an advisory lock tag whose fourth
 * field no SQL function of PostgreSQL uses (pg_advisory_lock() uses 1 and
 * 2), so no role can take it and hold a tenant's queues or timers up.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

#include "api/quota.h"
#include "api/as_owner.h"
#include "base/locks.h"
#include "base/settings.h"
#include "launcher/restore.h"
#include "launcher/slots.h"

/*
 * Count the owner's rows with a snapshot that sees every commit before
 * the lock was granted (and this transaction's own rows, those of the
 * statement running included), as the table's owner: row-level security
 * must not hide rows from the count.
 */
static void
count_rows(const char *relname, Oid owner, const char *name, int64 *count, bool *exists)
{
	Oid			types[2] = {OIDOID, TEXTOID};
	Datum		values[2] = {ObjectIdGetDatum(owner), CStringGetTextDatum(name)};
	JfAsOwner	as_owner;
	SPIPlanPtr	plan;
	bool		isnull;
	int			ret;
	char	   *sql;

	/* jf_as_owner_begin pins search_path for the statement's planning too */
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	jf_as_owner_begin(relname, &as_owner);
	sql = psprintf("SELECT pg_catalog.count(*),"
				   "       pg_catalog.bool_or(x.name OPERATOR(pg_catalog.=) $2)"
				   "  FROM jobflow.%s x"
				   " WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) $1", relname);
	plan = SPI_prepare(sql, 2, types);
	if (plan == NULL)
		elog(ERROR, "could not count the rows of jobflow.%s: %s", relname,
			 SPI_result_code_string(SPI_result));
	ret = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(), InvalidSnapshot,
							   false, false, 1);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not count the rows of jobflow.%s: %s", relname,
			 SPI_result_code_string(ret));
	*count = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*exists = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (isnull)
		*exists = false;
	jf_as_owner_end(&as_owner);
	SPI_finish();
}

void
jf_quota_check(JfQuotaKind kind, Oid owner, const char *name)
{
	bool		queues = kind == JF_QUOTA_QUEUES;
	int			limit = queues ? jobflow_max_queues_per_role : jobflow_max_timers_per_role;
	LOCKTAG		tag;
	int64		count;
	bool		exists;
	char	   *role;

	if (limit == 0 || jf_restore_marked())
		return;
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) owner, (uint32) kind,
						 JF_QUOTA_LOCK_FIELD4);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	count_rows(queues ? "queues" : "cron_timers", owner, name, &count, &exists);
	if (exists || count < limit)
		return;
	role = GetUserNameFromId(owner, true);
	if (queues)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("role \"%s\" may not configure more than %d queues",
						role ? role : "?", limit),
				 errdetail("It has %lld configured queues (rows of jobflow.queues).",
						   (long long) count),
				 errhint("Drop the configurations it no longer needs with jobflow.drop_queue(), or raise jobflow.max_queues_per_role.")));
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("role \"%s\" may not have more than %d cron timers",
					role ? role : "?", limit),
			 errdetail("It has %lld cron timers.", (long long) count),
			 errhint("Delete the timers it no longer needs with jobflow.unschedule_cron(), or raise jobflow.max_timers_per_role.")));
}
