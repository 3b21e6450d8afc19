/*-------------------------------------------------------------------------
 *
 * prepared.c
 *	  Wake-ups of prepared transactions (two-phase commit).
 *
 * A transaction that schedules tasks wakes the worker at its commit
 * (api/commit_wake.c), so a task due soon fires on time.  A prepared
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
 * The timers and queues it changed are kept the same way, up to
 * JF_PREPARED_KEYS of each (more: all of them), so that COMMIT PREPARED
 * makes the worker read those, as the commit would have.  The slot keeps
 * JF_PREPARED_MAX transactions at once.  One prepared while no worker
 * served the database, or still prepared across a server restart (shared
 * memory is gone, like the worker's wheel), is adopted by the worker as it
 * starts, as having changed every timer and queue; one that does not fit
 * is counted as lost, and a COMMIT PREPARED of a GID the slot does not
 * hold then stands for everything, once per lost one.  Otherwise such a
 * COMMIT PREPARED asks for nothing: any role can prepare and commit
 * transactions, and must not make the worker run statements by it.  The
 * tasks of all of them are found by the worker's rescans: within
 * jobflow.reconcile_interval if due in the rolling window, else at the
 * next full rescan of overdue tasks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"

#include "launcher/prepared.h"
#include "launcher/wake.h"

StaticAssertDecl(JF_GID_SIZE == GIDSIZE, "JF_GID_SIZE must be GIDSIZE");

/*
 * The GID of the PREPARE TRANSACTION this backend runs (or ran last), and
 * whether an entry was kept for it (the callbacks of several modules keep
 * one entry together).
 */
static char preparing_gid[JF_GID_SIZE] = "";
static bool kept_this_prepare = false;
static bool lost_this_prepare = false;	/* counted once in prepared_lost */

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
		lost_this_prepare = false;
	}
}

/*
 * The entry of this PREPARE in slot s, made if need be; NULL when none is
 * free (counted as lost).  Under the slot's wake_mutex.
 */
static JfPreparedWake *
entry_for(JfSlot *s, const char *gid, bool *made)
{
	int			i;

	*made = false;
	for (i = 0; i < JF_PREPARED_MAX; i++)
	{
		JfPreparedWake *w = &s->prepared[i];

		/* left by a database the slot served before */
		if (w->dboid != MyDatabaseId)
			w->dboid = InvalidOid;
		if (w->dboid == MyDatabaseId && strcmp(w->gid, gid) == 0)
			return w;
	}
	for (i = 0; i < JF_PREPARED_MAX; i++)
	{
		JfPreparedWake *w = &s->prepared[i];

		if (w->dboid != InvalidOid)
			continue;
		memset(w, 0, sizeof(*w));
		w->dboid = MyDatabaseId;
		strlcpy(w->gid, gid, sizeof(w->gid));
		w->lo = 1;
		w->hi = 0;
		*made = true;
		return w;
	}
	s->prepared_lost++;
	return NULL;
}

/*
 * Add to this PREPARE's entry: the ids lo..hi (lo > hi: none), the timers
 * and queues named (more than an entry holds: all), or all of them.
 */
static void
keep(int64 lo, int64 hi, const int64 *timers, int nt, bool all_timers,
	 const JfQueueKey *queues, int nq, bool all_queues)
{
	JfSlot	   *s = jf_db_slot(MyDatabaseId);
	JfPreparedWake *entry;
	bool		made;
	int			i;

	/* no worker: the one to come adopts it (jf_prepared_adopt) */
	if (s == NULL || preparing_gid[0] == '\0')
		return;
	SpinLockAcquire(&s->wake_mutex);
	/* a prepare that found no room is counted once */
	entry = kept_this_prepare || !lost_this_prepare ? entry_for(s, preparing_gid, &made) : NULL;
	if (entry == NULL)
		lost_this_prepare = true;
	else
	{
		if (lo <= hi)
		{
			entry->lo = entry->lo <= entry->hi ? Min(entry->lo, lo) : lo;
			entry->hi = Max(entry->hi, hi);
		}
		if (all_timers || entry->ntimers + nt > JF_PREPARED_KEYS)
			entry->cron = true;
		else
			for (i = 0; i < nt; i++)
				entry->timer_ids[entry->ntimers++] = timers[i];
		if (all_queues || entry->nqueues + nq > JF_PREPARED_KEYS)
			entry->queues = true;
		else
			for (i = 0; i < nq; i++)
				entry->queue_keys[entry->nqueues++] = queues[i];
		kept_this_prepare = true;
	}
	SpinLockRelease(&s->wake_mutex);
}

/*
 * Called by each module that has something to keep (api/commit_wake.c
 * for tasks, api/changes.c for timers and queues), in the prepare callbacks of one
 * PREPARE TRANSACTION: the second call adds to the entry the first made.
 */
void
jf_prepared_keep(int64 lo, int64 hi, bool cron, bool queues)
{
	keep(lo, hi, NULL, 0, cron, NULL, 0, queues);
}

void
jf_prepared_keep_changes(const int64 *timers, int nt, bool all_timers,
						 const JfQueueKey *queues, int nq, bool all_queues)
{
	keep(1, 0, timers, nt, all_timers, queues, nq, all_queues);
}

/*
 * COMMIT PREPARED is done (its tasks are visible): publish what its
 * PREPARE kept.  ROLLBACK PREPARED: forget it.  An error in the statement
 * skips this, and the entry stays for the COMMIT or ROLLBACK to come.  A
 * COMMIT PREPARED of a GID the slot does not hold asks for nothing, unless
 * prepares were lost (no room, see jf_prepared_adopt): then it may be one
 * of them, and stands for every timer and queue, once per lost prepare.
 * Any role can prepare and commit transactions: it must not make the
 * worker run statements by that alone.
 */
void
jf_prepared_utility_after(Node *parsetree)
{
	const char *gid = gid_of(parsetree, TRANS_STMT_COMMIT_PREPARED);
	bool		commit = gid != NULL;
	JfSlot	   *s;
	JfPreparedWake found;
	bool		have = false;
	bool		lost = false;
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
	if (!have && s->prepared_lost > 0)
	{
		s->prepared_lost--;
		lost = commit;
	}
	SpinLockRelease(&s->wake_mutex);
	if (commit && have)
	{
		if (found.lo <= found.hi)
			jf_publish_wake(&found.lo, &found.hi, 1, false, false);
		if (found.cron || found.queues || found.ntimers > 0 || found.nqueues > 0)
			jf_publish_changes(found.timer_ids, found.ntimers, found.cron,
							   found.queue_keys, found.nqueues, found.queues);
	}
	else if (lost)
		jf_publish_changes(NULL, 0, true, NULL, 0, true);
}

/*
 * The slot is in shared memory: a server restart empties it, and a
 * transaction prepared while no worker served the database kept nothing.
 * Whatever is prepared in this database when a worker starts is kept as
 * having changed every timer and queue (its tasks are found by the
 * rescans); what does not fit is counted as lost.  Entries of GIDs no
 * longer prepared go.
 */
void
jf_prepared_adopt(void)
{
	JfSlot	   *s = jf_db_slot(MyDatabaseId);
	char	  **gids;
	int			n;
	int			i;
	int			k;
	bool		made;

	if (s == NULL)
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute("SELECT p.gid FROM pg_catalog.pg_prepared_xacts p"
					" WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the prepared transactions");
	n = (int) SPI_processed;
	gids = palloc(sizeof(char *) * (n + 1));
	for (i = 0; i < n; i++)
		gids[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
	SPI_finish();

	SpinLockAcquire(&s->wake_mutex);
	for (k = 0; k < JF_PREPARED_MAX; k++)
	{
		JfPreparedWake *w = &s->prepared[k];

		if (w->dboid != MyDatabaseId)
			continue;
		for (i = 0; i < n; i++)
			if (strcmp(w->gid, gids[i]) == 0)
				break;
		if (i == n)
			w->dboid = InvalidOid;
	}
	s->prepared_lost = 0;
	for (i = 0; i < n; i++)
	{
		JfPreparedWake *w = entry_for(s, gids[i], &made);

		if (w != NULL && made)
		{
			w->cron = true;
			w->queues = true;
		}
	}
	SpinLockRelease(&s->wake_mutex);
}
