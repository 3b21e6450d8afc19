/*-------------------------------------------------------------------------
 *
 * prepared.c
 *	  Wake-ups of prepared transactions (two-phase commit).
 *
 * A transaction that schedules tasks wakes the worker at its commit
 * (task_check.c), so a task due soon fires on time.  A prepared
 * transaction has no such commit in its own backend: COMMIT PREPARED may
 * come from any session, much later, and its tasks became visible then
 * with nobody to tell the worker, which found them at its next rolling
 * rescan, up to jobflow.reconcile_interval late.  (NOTIFY is refused in a
 * transaction that is to be prepared.)
 *
 * So at PREPARE TRANSACTION the ids the transaction wrote (one range, from
 * the lowest to the highest) are kept in the database's slot in shared
 * memory, under the transaction's GID; COMMIT PREPARED of that GID, in the
 * same database (PostgreSQL requires it), publishes them as the commit
 * would have, once the commit is visible; ROLLBACK PREPARED forgets them.
 * The slot keeps JF_PREPARED_MAX of them at once.  One that does not fit,
 * one prepared while no worker served the database, and one still
 * prepared across a server restart (shared memory is gone, like the
 * worker's wheel) are found by the worker's rescans instead: within
 * jobflow.reconcile_interval if due in the rolling window, else at the
 * next full rescan of overdue tasks.  A COMMIT PREPARED whose GID the slot
 * does not hold asks for nothing: any role can prepare and commit
 * transactions, and must not make the worker run statements by it.
 *
 *-------------------------------------------------------------------------
 */
#include "prepared.h"
#include "launcher.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"

StaticAssertDecl(JF_GID_SIZE == GIDSIZE, "JF_GID_SIZE must be GIDSIZE");

/*
 * The GID of the PREPARE TRANSACTION this backend runs (or ran last), and
 * whether an entry was kept for it (the callbacks of several modules keep
 * one entry together).
 */
static char preparing_gid[JF_GID_SIZE] = "";
static bool kept_this_prepare = false;

/* The GID of a transaction statement of the given kind, else NULL. */
static const char *
gid_of(Node *parsetree, TransactionStmtKind kind)
{
	TransactionStmt *stmt;

	if (parsetree == NULL || !IsA(parsetree, TransactionStmt))
		return NULL;
	stmt = (TransactionStmt *) parsetree;
	return stmt->kind == kind ? stmt->gid : NULL;
}

/*
 * PREPARE TRANSACTION runs the transaction's pre-prepare and prepare
 * callbacks after the statement itself: remember its GID for them.
 */
void
jf_prepared_utility_before(Node *parsetree)
{
	const char *gid = gid_of(parsetree, TRANS_STMT_PREPARE);

	if (gid != NULL)
	{
		strlcpy(preparing_gid, gid, sizeof(preparing_gid));
		kept_this_prepare = false;
	}
}

/*
 * Called by each module that has something to keep (task_check.c for
 * tasks, changes.c for timers and queues), in the prepare callbacks of one
 * PREPARE TRANSACTION: the second call adds to the entry the first made.
 */
void
jf_prepared_keep(int64 lo, int64 hi, bool cron, bool queues)
{
	JobflowShared *s = jf_db_slot(MyDatabaseId);
	JfPreparedWake *entry = NULL;
	int			i;

	/* no worker: the one to come scans the table */
	if (s == NULL || preparing_gid[0] == '\0')
		return;
	SpinLockAcquire(&s->wake_mutex);
	for (i = 0; i < JF_PREPARED_MAX; i++)
	{
		JfPreparedWake *w = &s->prepared[i];

		/* left by a database the slot served before */
		if (w->dboid != MyDatabaseId)
			w->dboid = InvalidOid;
		if (kept_this_prepare && w->dboid == MyDatabaseId &&
			strcmp(w->gid, preparing_gid) == 0)
		{
			entry = w;
			break;
		}
	}
	if (entry != NULL)
	{
		entry->lo = Min(entry->lo, lo);
		entry->hi = Max(entry->hi, hi);
		entry->cron |= cron;
		entry->queues |= queues;
	}
	else
	{
		for (i = 0; i < JF_PREPARED_MAX && entry == NULL; i++)
			if (s->prepared[i].dboid == InvalidOid)
				entry = &s->prepared[i];
		/* none free: the rescans find its tasks (see the file header) */
		if (entry != NULL)
		{
			entry->dboid = MyDatabaseId;
			strlcpy(entry->gid, preparing_gid, sizeof(entry->gid));
			entry->lo = lo;
			entry->hi = hi;
			entry->cron = cron;
			entry->queues = queues;
			kept_this_prepare = true;
		}
	}
	SpinLockRelease(&s->wake_mutex);
}

/*
 * COMMIT PREPARED is done (its tasks are visible): publish what its
 * PREPARE kept.  ROLLBACK PREPARED: forget it.  An error in the statement
 * skips this, and the entry stays for the COMMIT or ROLLBACK to come.
 */
void
jf_prepared_utility_after(Node *parsetree)
{
	const char *gid = gid_of(parsetree, TRANS_STMT_COMMIT_PREPARED);
	bool		commit = gid != NULL;
	JobflowShared *s;
	JfPreparedWake found;
	bool		have = false;
	int			i;

	if (gid == NULL)
		gid = gid_of(parsetree, TRANS_STMT_ROLLBACK_PREPARED);
	if (gid == NULL || (s = jf_db_slot(MyDatabaseId)) == NULL)
		return;
	SpinLockAcquire(&s->wake_mutex);
	for (i = 0; i < JF_PREPARED_MAX; i++)
	{
		JfPreparedWake *w = &s->prepared[i];

		if (w->dboid == MyDatabaseId && strcmp(w->gid, gid) == 0)
		{
			found = *w;
			have = true;
			w->dboid = InvalidOid;
			break;
		}
	}
	SpinLockRelease(&s->wake_mutex);
	if (commit && have)
	{
		int			n = found.lo <= found.hi ? 1 : 0;

		if (n > 0 || found.cron || found.queues)
			jobflow_publish_wake(&found.lo, &found.hi, n, found.cron, found.queues);
	}
}
