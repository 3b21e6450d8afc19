/*-------------------------------------------------------------------------
 *
 * hook.c
 *	  What backends tell jobflow's launcher and workers: requests sent at
 *	  commit (CREATE EXTENSION, CREATE DATABASE), the wake-ups of DROP
 *	  EXTENSION and of subscriptions' changes (a subscriber's workers hold),
 *	  holds on a database for DROP DATABASE and the like, and the WARNING
 *	  of CREATE EXTENSION in a database that will not be served.
 *
 * Called from the utility hook (jobflow.c), before and after each
 * statement.  See slots.c for the slots and the locking, launcher.c for the
 * launcher.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "launcher/hook.h"
#include "base/compat.h"
#include "launcher/internal.h"

#define HOLD_EXTRA_MS 10000		/* a held worker's exit, after its grace */

/* this backend's requests, sent when its transaction ends */
#define MAX_LOCAL 16
static struct
{
	Oid			serve[MAX_LOCAL];
	int			nserve;
	Oid			probe[MAX_LOCAL];
	int			nprobe;
	Oid			recheck[MAX_LOCAL];
	int			nrecheck;
	Oid			held[MAX_LOCAL];
	int			nheld;
	bool		callback;
}			local;

/*
 * The transaction ends: holds end either way (and the launcher looks at
 * the databases held again); what a committed transaction asked for goes
 * to the launcher or the worker.  Nothing here can fail.
 */
static void
launcher_xact_callback(XactEvent event, void *arg)
{
	bool		commit;
	int			i;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			commit = true;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			commit = false;
			break;
		default:
			return;
	}
	if (local.nheld > 0)
	{
		SpinLockAcquire(&jf_ls->mutex);
		for (i = 0; i < MAX_HOLDS; i++)
			if (jf_ls->holds[i].pid == MyProcPid)
				jf_ls->holds[i].pid = 0;
		SpinLockRelease(&jf_ls->mutex);
		for (i = 0; i < local.nheld; i++)
			jf_launcher_post(local.held[i], REQ_PROBE);
	}
	if (commit)
	{
		for (i = 0; i < local.nserve; i++)
			jf_launcher_post(local.serve[i], REQ_SERVE);
		for (i = 0; i < local.nprobe; i++)
			jf_launcher_post(local.probe[i], REQ_PROBE);
		/* DROP EXTENSION, subscriptions: its workers look at them now */
		for (i = 0; i < local.nrecheck; i++)
			jf_db_wake(local.recheck[i], true);
	}
	local.nheld = local.nserve = local.nprobe = local.nrecheck = 0;
}

static void
remember(Oid *list, int *n, Oid dboid)
{
	if (jf_ls == NULL || !OidIsValid(dboid))
		return;
	if (!local.callback)
	{
		RegisterXactCallback(launcher_xact_callback, NULL);
		local.callback = true;
	}
	if (*n < MAX_LOCAL)
		list[(*n)++] = dboid;
}

/*
 * DROP DATABASE and the like need the database to themselves: hold it (no
 * worker or probe starts there until this transaction ends), tell its
 * worker to stop and wait for it to exit.  Only the database's owner (or
 * a superuser) holds it: anyone else's statement fails its own privilege
 * check, and must not stop the worker meanwhile.
 */
static void
hold(Oid dboid)
{
	TimestampTz give_up;
	pid_t		pids[JF_MAX_WORKERS_PER_DB * 2];
	int			npids = 0;
	int			i;
	bool		recorded = false;

	if (jf_ls == NULL || !OidIsValid(dboid) || !jf_database_owned(dboid))
		return;
	remember(local.held, &local.nheld, dboid);
	SpinLockAcquire(&jf_ls->mutex);
	for (i = 0; i < MAX_HOLDS && !recorded; i++)
	{
		if (jf_ls->holds[i].pid == 0)
		{
			jf_ls->holds[i].pid = MyProcPid;
			jf_ls->holds[i].dboid = dboid;
			recorded = true;
		}
	}
	for (i = 0; i < jf_slots_count(); i++)
	{
		JfSlot	   *s = &jf_ls->slots[i];

		SpinLockAcquire(&s->mutex);
		if (s->dboid == dboid && s->worker_pid != 0 && npids < lengthof(pids))
			pids[npids++] = s->worker_pid;
		SpinLockRelease(&s->mutex);
	}
	SpinLockRelease(&jf_ls->mutex);
	if (npids == 0)
		return;
	if (!recorded)
		ereport(WARNING,
				(errmsg("jobflow cannot hold more than %d databases at once", MAX_HOLDS),
				 errdetail("The workers of this database may start again before the statement runs.")));

	/* they take up to jobflow.shutdown_grace for requests in flight */
	for (i = 0; i < npids; i++)
		(void) kill(pids[i], SIGTERM);
	give_up = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										  jobflow_shutdown_grace_ms + HOLD_EXTRA_MS);
	for (;;)
	{
		bool		running = false;

		for (i = 0; i < jf_slots_count(); i++)
		{
			JfSlot	   *s = &jf_ls->slots[i];

			SpinLockAcquire(&s->mutex);
			running |= s->dboid == dboid && s->worker_pid != 0;
			SpinLockRelease(&s->mutex);
		}
		if (!running || GetCurrentTimestamp() >= give_up)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, jf_wait_event(JF_WAIT_WORKER_EXIT));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

static Oid
database_option(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *d = (DefElem *) lfirst(lc);

		if (strcmp(d->defname, name) == 0 && d->arg != NULL)
			return get_database_oid(defGetString(d), true);
	}
	return InvalidOid;
}

static bool
has_option(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
		if (strcmp(((DefElem *) lfirst(lc))->defname, name) == 0)
			return true;
	return false;
}

/* Before a statement: hold the databases it needs to itself. */
void
jf_launcher_utility_before(Node *parsetree)
{
	switch (nodeTag(parsetree))
	{
		case T_DropdbStmt:
			hold(get_database_oid(((DropdbStmt *) parsetree)->dbname, true));
			break;
		case T_CreateSubscriptionStmt:
		case T_AlterSubscriptionStmt:
		case T_DropSubscriptionStmt:
			/* a subscriber's workers hold (jobflow.dispatch): they look now */
			if (jf_ls != NULL)
				remember(local.recheck, &local.nrecheck, MyDatabaseId);
			break;
		case T_CreatedbStmt:
			hold(database_option(((CreatedbStmt *) parsetree)->options, "template"));
			break;
		case T_RenameStmt:
			if (((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
				hold(get_database_oid(((RenameStmt *) parsetree)->subname, true));
			break;
		case T_AlterDatabaseStmt:
			if (has_option(((AlterDatabaseStmt *) parsetree)->options, "tablespace"))
				hold(get_database_oid(((AlterDatabaseStmt *) parsetree)->dbname, true));
			break;
		default:
			break;
	}
}

/*
 * CREATE EXTENSION jobflow: say now if this database will not be served
 * (a template, or every slot taken by other databases).
 */
static void
warn_if_unserved(void)
{
	HeapTuple	tup;
	bool		template = false;
	int			taken = 0;
	int			i;
	char	   *name = get_database_name(MyDatabaseId);

	tup = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
	if (HeapTupleIsValid(tup))
	{
		template = ((Form_pg_database) GETSTRUCT(tup))->datistemplate;
		ReleaseSysCache(tup);
	}
	if (template)
	{
		ereport(WARNING,
				(errmsg("jobflow does not serve template database \"%s\"", name),
				 errdetail("Tasks scheduled in a template database never fire; databases created from it have jobflow and are served.")));
		return;
	}
	SpinLockAcquire(&jf_ls->mutex);
	for (i = 0; i < jf_slots_count(); i++)
	{
		if (jf_ls->slots[i].dboid == MyDatabaseId)
		{
			taken = -1;
			break;
		}
		if (OidIsValid(jf_ls->slots[i].dboid) && jf_ls->slots[i].part == 0)
			taken++;
	}
	SpinLockRelease(&jf_ls->mutex);
	if (taken >= jobflow_max_databases)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("jobflow serves at most %d databases, and as many are served: database \"%s\" is not",
						jobflow_max_databases, name),
				 errdetail("Tasks scheduled in this database stay pending until another database drops extension jobflow or is dropped."),
				 errhint("Raise jobflow.max_databases (and max_worker_processes) and restart the server.")));
}

/*
 * Whether a CREATE EXTENSION may have made jobflow: it names jobflow, or
 * it names an extension that requires it (jobflow_net) with CASCADE, and
 * jobflow is there now.
 */
static bool
creates_jobflow(CreateExtensionStmt *stmt)
{
	ListCell   *lc;

	if (strcmp(stmt->extname, "jobflow") == 0)
		return true;
	foreach(lc, stmt->options)
	{
		DefElem    *opt = (DefElem *) lfirst(lc);

		if (strcmp(opt->defname, "cascade") == 0 && defGetBoolean(opt))
			return OidIsValid(get_extension_oid("jobflow", true));
	}
	return false;
}

static bool
names_jobflow(List *objects)
{
	ListCell   *lc;

	foreach(lc, objects)
		if (strcmp(strVal(lfirst(lc)), "jobflow") == 0)
			return true;
	return false;
}

/* After a statement: what the launcher or a worker must hear at commit. */
void
jf_launcher_utility_after(Node *parsetree)
{
	switch (nodeTag(parsetree))
	{
		case T_CreateExtensionStmt:
			if (jf_ls != NULL && creates_jobflow((CreateExtensionStmt *) parsetree))
			{
				remember(local.serve, &local.nserve, MyDatabaseId);
				warn_if_unserved();
			}
			break;
		case T_DropStmt:
			if (((DropStmt *) parsetree)->removeType == OBJECT_EXTENSION &&
				names_jobflow(((DropStmt *) parsetree)->objects))
				remember(local.recheck, &local.nrecheck, MyDatabaseId);
			break;
		case T_CreatedbStmt:
			/* a copy of a database with jobflow has it too */
			remember(local.probe, &local.nprobe,
					 get_database_oid(((CreatedbStmt *) parsetree)->dbname, true));
			break;
		default:
			break;
	}
}

