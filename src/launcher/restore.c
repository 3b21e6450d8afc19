/*-------------------------------------------------------------------------
 *
 * restore.c
 *	  Restores in progress: which sessions are loading jobflow's tables
 *	  from a dump, in shared memory, for the workers of every database.
 *
 * COPY FROM into jobflow's tables with their id columns (what pg_dump
 * writes, and no application may), by a role that may write those rows
 * (INSERT on the table, no row-level security), marks the session as a
 * restore in progress until it ends or runs DISCARD ALL; the mark goes at
 * once if the (sub)transaction that made it aborts.  Anyone else's COPY
 * fails its privilege check and marks nothing.  The worker claims and
 * materialises nothing while a restore is in progress in its database
 * (worker/guard.c), and what a restore loads is not held to the per-role
 * limits (api/quota.c).  The utility hook (jobflow.c) calls in here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/ipc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/rls.h"

#include "launcher/restore.h"
#include "launcher/slots.h"

/* sessions restoring at once, cluster-wide (pg_restore -j N uses N + 1) */
#define MAX_RESTORERS 64

typedef struct RestoreShared
{
	slock_t		mutex;
	struct
	{
		pid_t		pid;		/* 0: free */
		Oid			dboid;
	}			restorer[MAX_RESTORERS];
} RestoreShared;

static RestoreShared *restore_shared = NULL;

/*
 * This session's restore mark: none, made by the transaction running (it
 * goes if that transaction, or the subtransaction that made it, aborts),
 * or kept by a committed one until the session ends or runs DISCARD ALL.
 */
typedef enum RestoreMark
{
	MARK_NONE,
	MARK_THIS_XACT,
	MARK_SESSION
} RestoreMark;

static RestoreMark mark = MARK_NONE;
static SubTransactionId mark_subid = InvalidSubTransactionId;
static bool mark_callbacks = false;
static bool exit_callback = false;

/* The shared memory of the restore marks, for the shmem hooks. */
Size
jf_restore_shmem_size(void)
{
	return MAXALIGN(sizeof(RestoreShared));
}

/* In the postmaster's shmem startup hook, AddinShmemInitLock held. */
void
jf_restore_shmem_init(void)
{
	bool		found;

	restore_shared = ShmemInitStruct("jobflow restores", sizeof(RestoreShared), &found);
	if (!found)
	{
		memset(restore_shared, 0, sizeof(RestoreShared));
		SpinLockInit(&restore_shared->mutex);
	}
}

/*
 * The mark goes (the session ends, runs DISCARD ALL, or the transaction
 * that made the mark aborts): free its slot and wake the workers at once.
 * Nothing here can fail: it runs in transaction callbacks too.
 */
static void
release_restorer(void)
{
	int			i;

	mark = MARK_NONE;
	mark_subid = InvalidSubTransactionId;
	if (restore_shared == NULL)
		return;
	SpinLockAcquire(&restore_shared->mutex);
	for (i = 0; i < MAX_RESTORERS; i++)
		if (restore_shared->restorer[i].pid == MyProcPid)
			restore_shared->restorer[i].pid = 0;
	SpinLockRelease(&restore_shared->mutex);
	jf_db_wake(MyDatabaseId, false);
}

static void
unregister_restorer(int code, Datum arg)
{
	if (mark != MARK_NONE)
		release_restorer();
}

/*
 * A mark made by this transaction: kept at its commit (a restore's COPY
 * commits one table at a time, and its next tables are still to come),
 * gone at its abort.
 */
static void
mark_xact_callback(XactEvent event, void *arg)
{
	if (mark != MARK_THIS_XACT)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			mark = MARK_SESSION;
			mark_subid = InvalidSubTransactionId;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			release_restorer();
			break;
		default:
			break;
	}
}

/* ... and by the subtransaction that made it: ROLLBACK TO SAVEPOINT. */
static void
mark_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	if (mark != MARK_THIS_XACT || mySubid != mark_subid)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		release_restorer();
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		mark_subid = parentSubid;
}

/*
 * Mark this session as restoring jobflow's tables in this database.  With
 * every slot taken, the sequence check still holds the worker back once
 * ids are loaded.
 */
static void
register_restorer(void)
{
	int			i;
	bool		taken = false;

	if (mark != MARK_NONE || restore_shared == NULL)
		return;
	if (!mark_callbacks)
	{
		RegisterXactCallback(mark_xact_callback, NULL);
		RegisterSubXactCallback(mark_subxact_callback, NULL);
		mark_callbacks = true;
	}
	SpinLockAcquire(&restore_shared->mutex);
	for (i = 0; i < MAX_RESTORERS; i++)
	{
		if (restore_shared->restorer[i].pid == 0)
		{
			restore_shared->restorer[i].pid = MyProcPid;
			restore_shared->restorer[i].dboid = MyDatabaseId;
			taken = true;
			break;
		}
	}
	SpinLockRelease(&restore_shared->mutex);
	if (!taken)
		return;
	mark = MARK_THIS_XACT;
	mark_subid = GetCurrentSubTransactionId();
	if (!exit_callback)
	{
		before_shmem_exit(unregister_restorer, (Datum) 0);
		exit_callback = true;
	}
}

/*
 * Whether this session restores jobflow's tables: what it loads was
 * dumped, and is not held to the per-role limits (quota.c).
 */
bool
jf_restore_marked(void)
{
	return mark != MARK_NONE;
}

/*
 * Whether some live session is restoring jobflow's tables in the worker's
 * database.  A slot whose process is gone (it crashed before its exit
 * callback ran) is freed here.
 */
bool
jf_restore_in_progress(void)
{
	pid_t		pids[MAX_RESTORERS];
	int			n = 0;
	int			i;
	bool		found = false;

	if (restore_shared == NULL)
		return false;
	SpinLockAcquire(&restore_shared->mutex);
	for (i = 0; i < MAX_RESTORERS; i++)
		if (restore_shared->restorer[i].pid != 0 &&
			restore_shared->restorer[i].dboid == MyDatabaseId)
			pids[n++] = restore_shared->restorer[i].pid;
	SpinLockRelease(&restore_shared->mutex);
	for (i = 0; i < n; i++)
	{
		if (BackendPidGetProc(pids[i]) != NULL)
		{
			found = true;
			continue;
		}
		SpinLockAcquire(&restore_shared->mutex);
		for (int k = 0; k < MAX_RESTORERS; k++)
			if (restore_shared->restorer[k].pid == pids[i])
				restore_shared->restorer[k].pid = 0;
		SpinLockRelease(&restore_shared->mutex);
	}
	return found;
}

/*
 * COPY FROM into jobflow's tables with their id columns, or into its log:
 * what pg_dump writes.  Applications may insert neither ids nor log rows.
 * It is a restore only if the current user may write those rows: INSERT
 * on the table (not only on some columns) and no row-level security in
 * the way, which is what a restoring superuser or owner has.  Anyone else's
 * COPY fails its privilege check right after this, and must not have held
 * the worker back meanwhile, nor after.
 */
static bool
is_restore_copy(CopyStmt *stmt)
{
	Oid			nsp;
	Oid			relid;
	const char *relname;
	ListCell   *lc;

	if (!stmt->is_from || stmt->relation == NULL)
		return false;
	nsp = get_namespace_oid("jobflow", true);
	if (!OidIsValid(nsp))
		return false;
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (!OidIsValid(relid) || get_rel_namespace(relid) != nsp)
		return false;
	relname = get_rel_name(relid);
	if (strcmp(relname, "task_log") != 0)
	{
		bool		ids = stmt->attlist == NIL;

		if (strcmp(relname, "tasks") != 0 && strcmp(relname, "cron_timers") != 0)
			return false;
		foreach(lc, stmt->attlist)
		{
			if (strcmp(strVal(lfirst(lc)), "id") == 0)
				ids = true;
		}
		if (!ids)
			return false;
	}
	return pg_class_aclcheck(relid, GetUserId(), ACL_INSERT) == ACLCHECK_OK &&
		check_enable_rls(relid, InvalidOid, true) != RLS_ENABLED;
}

/* The utility hook, before a statement: a restore's COPY marks the session. */
void
jf_restore_utility_before(Node *parsetree)
{
	if (IsA(parsetree, CopyStmt) && is_restore_copy((CopyStmt *) parsetree))
		register_restorer();
}

/* ... after: a pooler hands the connection to someone else, no restore. */
void
jf_restore_utility_after(Node *parsetree)
{
	if (IsA(parsetree, DiscardStmt) &&
		((DiscardStmt *) parsetree)->target == DISCARD_ALL && mark != MARK_NONE)
		release_restorer();
}
