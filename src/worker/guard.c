/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  Integrity guards around jobflow's tables: what DROP EXTENSION, DROP
 *	  ROLE, DROP OWNED and REASSIGN OWNED do to tasks and timers, restores
 *	  in progress, and the extension incarnation the worker serves.
 *
 * The library is preloaded in every backend, so a ProcessUtility hook sees
 * every utility statement of the cluster:
 *
 *	- DROP EXTENSION jobflow is refused while tasks are pending or running
 *	  or timers active, unless CASCADE (which then says what it drops);
 *	- DROP ROLE is refused (2BP01) while the role owns such tasks or timers
 *	  in the current database, and otherwise deletes its configured
 *	  queues, secrets and signing secrets there; DROP OWNED BY cancels the
 *	  role's pending tasks and deletes its timers, queues, secrets and
 *	  signing secrets; REASSIGN OWNED BY moves its tasks, log rows, timers
 *	  and queues to the new role, and deletes its secrets and signing
 *	  secrets (the new role never gave those values);
 *	- COPY FROM into jobflow's tables with their id columns (what pg_dump
 *	  writes, and no application may), by a role that may write those rows
 *	  (INSERT on the table, no row-level security), marks the session as a
 *	  restore in progress, in shared memory, until it ends or runs DISCARD
 *	  ALL; the mark goes at once if the (sub)transaction that made it
 *	  aborts.  Anyone else's COPY fails its privilege check and marks
 *	  nothing.
 *
 * The worker, for its part, claims and materialises nothing while a restore
 * is in progress in its database or a sequence of jobflow is behind its
 * table (its ids would collide with rows still to come), and never fires a
 * task whose owner no longer exists (DROP ROLE may run in any database):
 * the claim skips them, and a sweep cancels them, pauses such timers and
 * deletes the roles' queues and secrets.  The sweep is for the roles gone
 * since the worker last looked (those dropping transactions published, and
 * those pg_authid no longer has), and the worker looks at most once per
 * jobflow.reconcile_interval after pg_authid changed: a role changing its
 * own password in a loop costs a read of pg_authid an interval, and no
 * sweep.  Every worker transaction first locks the
 * extension it serves (jf_guard_check_incarnation): if that extension was
 * dropped, the transaction fails before touching anything, and the worker
 * forgets what it held for it (outcomes in flight included); it serves a
 * new CREATE EXTENSION there, or exits and frees its slot (launcher.c).
 *
 *-------------------------------------------------------------------------
 */
#include "worker/guard.h"
#include "api/tenant_api.h"
#include "launcher/prepared.h"

#include "launcher/launcher.h"
#include "worker/worker.h"
#include "worker/xact.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/syscache.h"

/* sessions restoring at once, cluster-wide (pg_restore -j N uses N + 1) */
#define MAX_RESTORERS 64
/* roles dropped and not yet looked at by every worker, cluster-wide */
#define DROPPED_RING 256
/* roles one DROP ROLE transaction publishes (more: workers sweep all) */
#define MAX_DROPPED_LOCAL 64
/* more roles gone than this at one look: one sweep of every owner */
#define MAX_TARGETED 1000

typedef struct GuardShared
{
	slock_t		mutex;
	struct
	{
		pid_t		pid;		/* 0: free */
		Oid			dboid;
	}			restorer[MAX_RESTORERS];
	/* roles dropped by committed transactions, in any database */
	uint64		ndropped;		/* published since the server started */
	Oid			dropped[DROPPED_RING];	/* the last ones, at ndropped % size */
} GuardShared;

static GuardShared *guard_shared = NULL;
static ProcessUtility_hook_type prev_utility = NULL;
static shmem_startup_hook_type prev_startup = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_request = NULL;
#endif

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

/* roles this transaction dropped, published at its commit */
static Oid	dropped_here[MAX_DROPPED_LOCAL];
static int	ndropped_here = 0;
static bool dropped_overflow = false;
static bool drop_callback = false;

/* worker only */
static Oid	served_ext = InvalidOid;
static uint32 generation = 0;
static bool lost = false;
static bool roles_changed = true;	/* pg_authid changed since the last look */
static bool roles_looking = false;	/* a look began and did not finish */
static bool sweep_everything = true;	/* at start: every owner gone */
static int64 next_look_ms = 0;	/* one look per jobflow.reconcile_interval */
static Oid *known_roles = NULL;	/* pg_authid at the last look, sorted */
static int	nknown_roles = 0;
static uint64 seen_dropped = 0; /* GuardShared.ndropped at the last look */
static bool roles_callback = false;

static void
guard_shmem_request(void)
{
#if PG_VERSION_NUM >= 150000
	if (prev_request)
		prev_request();
#endif
	RequestAddinShmemSpace(MAXALIGN(sizeof(GuardShared)));
}

static void
guard_shmem_startup(void)
{
	bool		found;

	if (prev_startup)
		prev_startup();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	guard_shared = ShmemInitStruct("jobflow guard", sizeof(GuardShared), &found);
	if (!found)
	{
		memset(guard_shared, 0, sizeof(GuardShared));
		SpinLockInit(&guard_shared->mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* ----------------------------------------------------------------------
 * Restores in progress
 * ---------------------------------------------------------------------- */

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
	if (guard_shared == NULL)
		return;
	SpinLockAcquire(&guard_shared->mutex);
	for (i = 0; i < MAX_RESTORERS; i++)
		if (guard_shared->restorer[i].pid == MyProcPid)
			guard_shared->restorer[i].pid = 0;
	SpinLockRelease(&guard_shared->mutex);
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

	if (mark != MARK_NONE || guard_shared == NULL)
		return;
	if (!mark_callbacks)
	{
		RegisterXactCallback(mark_xact_callback, NULL);
		RegisterSubXactCallback(mark_subxact_callback, NULL);
		mark_callbacks = true;
	}
	SpinLockAcquire(&guard_shared->mutex);
	for (i = 0; i < MAX_RESTORERS; i++)
	{
		if (guard_shared->restorer[i].pid == 0)
		{
			guard_shared->restorer[i].pid = MyProcPid;
			guard_shared->restorer[i].dboid = MyDatabaseId;
			taken = true;
			break;
		}
	}
	SpinLockRelease(&guard_shared->mutex);
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
jf_guard_restoring(void)
{
	return mark != MARK_NONE;
}

/*
 * Whether some live session is restoring jobflow's tables in the worker's
 * database.  A slot whose process is gone (it crashed before its exit
 * callback ran) is freed here.
 */
bool
jf_guard_restore_in_progress(void)
{
	pid_t		pids[MAX_RESTORERS];
	int			n = 0;
	int			i;
	bool		found = false;

	if (guard_shared == NULL)
		return false;
	SpinLockAcquire(&guard_shared->mutex);
	for (i = 0; i < MAX_RESTORERS; i++)
		if (guard_shared->restorer[i].pid != 0 &&
			guard_shared->restorer[i].dboid == MyDatabaseId)
			pids[n++] = guard_shared->restorer[i].pid;
	SpinLockRelease(&guard_shared->mutex);
	for (i = 0; i < n; i++)
	{
		if (BackendPidGetProc(pids[i]) != NULL)
		{
			found = true;
			continue;
		}
		SpinLockAcquire(&guard_shared->mutex);
		for (int k = 0; k < MAX_RESTORERS; k++)
			if (guard_shared->restorer[k].pid == pids[i])
				guard_shared->restorer[k].pid = 0;
		SpinLockRelease(&guard_shared->mutex);
	}
	return found;
}

/*
 * Whether a sequence of jobflow would hand out an id already in use: the
 * state between a restore's COPY and its setval, or after a data-only
 * restore that left the sequences out.  Runs in the caller's transaction,
 * with SPI connected.
 */
bool
jf_guard_sequences_behind(void)
{
	int			ret;
	uint64		i;
	bool		behind = false;

	ret = SPI_execute(
		"SELECT (SELECT pg_catalog.max(t.id) FROM jobflow.tasks t)"
		"       OPERATOR(pg_catalog.>=) (s.last_value OPERATOR(pg_catalog.+) s.is_called::pg_catalog.int4)"
		"  FROM jobflow.tasks_id_seq s"
		" UNION ALL "
		"SELECT (SELECT pg_catalog.max(c.id) FROM jobflow.cron_timers c)"
		"       OPERATOR(pg_catalog.>=) (s.last_value OPERATOR(pg_catalog.+) s.is_called::pg_catalog.int4)"
		"  FROM jobflow.cron_timers_id_seq s", true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "reading jobflow's sequences failed: %s", SPI_result_code_string(ret));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull && DatumGetBool(d))
			behind = true;
	}
	return behind;
}

/*
 * Whether the worker may insert cron occurrences now: not while a restore
 * is in progress (the restored tasks, with the same ids and occurrences,
 * are still to come), nor while a sequence is behind its table.
 */
bool
jf_guard_may_materialise(bool *sequences_behind)
{
	*sequences_behind = false;
	if (jf_guard_restore_in_progress())
		return false;
	*sequences_behind = jf_guard_sequences_behind();
	return !*sequences_behind;
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

/* ----------------------------------------------------------------------
 * The incarnation the worker serves
 * ---------------------------------------------------------------------- */

static void
roles_changed_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	roles_changed = true;
}

/*
 * The worker starts serving the extension that exists now: a new
 * generation, so that outcomes of requests claimed for an earlier one are
 * never written.
 */
void
jf_guard_serve(void)
{
	StartTransactionCommand();
	served_ext = get_extension_oid("jobflow", true);
	CommitTransactionCommand();
	generation++;
	lost = false;
	/* the first look sweeps for every owner gone while nobody served */
	roles_changed = true;
	sweep_everything = true;
	next_look_ms = 0;
	if (!roles_callback)
	{
		CacheRegisterSyscacheCallback(AUTHOID, roles_changed_callback, (Datum) 0);
		roles_callback = true;
	}
}

uint32
jf_guard_generation(void)
{
	return generation;
}

/*
 * The lock that orders a worker's transactions and DROP EXTENSION jobflow
 * in this database: the worker takes it shared at the start of each
 * transaction, the DROP EXTENSION hook exclusively before the drop.  It is
 * not the extension's own lock: any role that owns a function may take
 * that one exclusively (ALTER FUNCTION ... DEPENDS ON EXTENSION jobflow)
 * and hold it in an open or prepared transaction, and every worker
 * transaction waited behind it.  No SQL function can take this tag.
 */
#define JF_SERVING_LOCK_FIELD4 0x6A67

static void
lock_serving(LOCKMODE mode)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, JF_SERVING_LOCK_FIELD4);
	(void) LockAcquire(&tag, mode, false, false);
}

/*
 * Called at the start of every worker transaction: take the serving lock
 * (DROP EXTENSION takes it first, so it waits for this transaction and
 * never deadlocks with it), then make sure the extension is still the one
 * served.  If not, fail the transaction before it touches anything; the
 * worker's error recovery sees jf_guard_take_lost() and reports nothing.
 */
void
jf_guard_check_incarnation(void)
{
	Oid			ext;

	if (!OidIsValid(served_ext))
		return;
	ext = get_extension_oid("jobflow", true);
	if (ext == served_ext)
	{
		lock_serving(AccessShareLock);
		/* dropped while we waited for the lock? */
		if (get_extension_oid("jobflow", true) == served_ext)
			return;
	}
	served_ext = InvalidOid;
	lost = true;
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("extension jobflow was dropped")));
}

/* Whether the last error was the loss of the extension (and forget it). */
bool
jf_guard_take_lost(void)
{
	bool		was = lost;

	lost = false;
	return was;
}

/* ----------------------------------------------------------------------
 * Dropped roles, as seen by the worker
 * ---------------------------------------------------------------------- */

/*
 * Whether the first worker of the database should look at the roles now:
 * pg_authid changed (or the worker starts, or the last look failed), and
 * the last look is a jobflow.reconcile_interval ago.  A role changing its
 * own password in a loop changes pg_authid as often as it likes; the
 * worker looks at most once an interval, and sweeps only for roles that
 * are gone.
 */
bool
jf_guard_roles_due(int64 now_ms)
{
	return (roles_changed || roles_looking) && now_ms >= next_look_ms;
}

/* When the worker's loop must wake for that look (INT64_MAX: no need). */
int64
jf_guard_roles_deadline(void)
{
	return roles_changed || roles_looking ? next_look_ms : PG_INT64_MAX;
}

static int
compare_oid(const void *a, const void *b)
{
	Oid			x = *(const Oid *) a;
	Oid			y = *(const Oid *) b;

	return (x > y) - (x < y);
}

/*
 * Run one sweep statement over the table named in sql (if it exists: the
 * tables came with different versions), for the roles in $1 or, with
 * everyone, for every owner no role has; the rows it changed.
 */
static uint64
sweep_table(const char *relname, const char *sql, Datum gone, bool everyone,
			int expected)
{
	Oid			types[1] = {OIDARRAYOID};
	char	   *text;
	int			ret;

	if (!OidIsValid(get_relname_relid(relname, get_namespace_oid("jobflow", false))))
		return 0;
	text = psprintf(sql, everyone ? "" :
					" AND x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)");
	ret = SPI_execute_with_args(text, everyone ? 0 : 1, types, &gone, NULL, false, 0);
	if (ret != expected)
		elog(ERROR, "sweeping jobflow.%s for dropped roles failed: %s", relname,
			 SPI_result_code_string(ret));
	jf_xact_count_statements(1);
	return SPI_processed;
}

#define NO_ROLE_LEFT \
	" AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_authid a" \
	"                  WHERE a.oid OPERATOR(pg_catalog.=) x.owner::pg_catalog.oid)"

/*
 * What roles that no longer exist left: their pending tasks are
 * cancelled, their timers paused, their configured queues, secrets and
 * signing secrets deleted (the claim never sends their tasks meanwhile).
 * With everyone, for every owner no role has; else for the roles in gone.
 * Every statement checks pg_authid again: an oid given to a new role since
 * is left alone.
 */
static void
sweep(Datum gone, bool everyone)
{
	uint64		tasks;
	uint64		timers;

	jf_metrics_count(JF_COUNT_ROLE_SWEEPS, 1);
	tasks = sweep_table("tasks",
						"UPDATE jobflow.tasks x SET state = 'cancelled',"
						"       last_error = 'cancelled: the role that owns this task no longer exists',"
						"       updated_at = pg_catalog.now()"
						" WHERE x.state OPERATOR(pg_catalog.=) 'pending'%s" NO_ROLE_LEFT,
						gone, everyone, SPI_OK_UPDATE);
	timers = sweep_table("cron_timers",
						 "UPDATE jobflow.cron_timers x SET active = false, next_at = NULL,"
						 "       updated_at = pg_catalog.now()"
						 " WHERE x.active%s" NO_ROLE_LEFT,
						 gone, everyone, SPI_OK_UPDATE);
	(void) sweep_table("queues", "DELETE FROM jobflow.queues x WHERE true%s" NO_ROLE_LEFT,
					   gone, everyone, SPI_OK_DELETE);
	(void) sweep_table("secrets", "DELETE FROM jobflow.secrets x WHERE true%s" NO_ROLE_LEFT,
					   gone, everyone, SPI_OK_DELETE);
	(void) sweep_table("signing_secrets",
					   "DELETE FROM jobflow.signing_secrets x WHERE true%s" NO_ROLE_LEFT,
					   gone, everyone, SPI_OK_DELETE);
	if (tasks + timers > 0)
		ereport(LOG,
				(errmsg("jobflow worker cancelled %llu pending task(s) and paused %llu cron timer(s) whose role was dropped",
						(unsigned long long) tasks, (unsigned long long) timers)));
}

/*
 * Look at the roles (pg_authid changed, or the worker starts): the roles
 * gone since the last look are those it knew then and the ones dropping
 * transactions published (a role made and dropped between two looks), of
 * which pg_authid has none now.  Only for those, if any, a sweep; at start,
 * or when more are gone than published or than a targeted sweep is for,
 * one sweep for every owner.  DROP ROLE may have run in another database,
 * where the utility hook cannot see jobflow's tables.  Reading pg_authid
 * costs a row per role, once per interval at most.
 */
void
jf_guard_sweep_roles(void)
{
	uint64		published;
	Oid		   *gone;
	int			ngone = 0;
	Oid		   *now;
	int			nnow;
	bool		everyone = sweep_everything;
	uint64		i;
	int			k;

	roles_changed = false;
	roles_looking = true;
	next_look_ms = jf_now_ms() + jobflow_reconcile_ms;
	jf_xact_begin("jobflow: look for dropped roles");
	jf_metrics_count(JF_COUNT_ROLE_CHECKS, 1);
	if (SPI_execute("SELECT a.oid FROM pg_catalog.pg_authid a", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "reading pg_authid failed");
	jf_xact_count_statements(1);
	nnow = (int) SPI_processed;
	now = palloc(sizeof(Oid) * Max(nnow, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		now[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
												SPI_tuptable->tupdesc, 1, &isnull));
	}
	qsort(now, nnow, sizeof(Oid), compare_oid);

	gone = palloc(sizeof(Oid) * (nknown_roles + DROPPED_RING + 1));
	for (k = 0; k < nknown_roles; k++)
		if (!bsearch(&known_roles[k], now, nnow, sizeof(Oid), compare_oid))
			gone[ngone++] = known_roles[k];
	SpinLockAcquire(&guard_shared->mutex);
	published = guard_shared->ndropped;
	if (published - seen_dropped > DROPPED_RING)
		everyone = true;
	else
		for (i = seen_dropped; i < published; i++)
		{
			Oid			oid = guard_shared->dropped[i % DROPPED_RING];

			if (!bsearch(&oid, now, nnow, sizeof(Oid), compare_oid))
				gone[ngone++] = oid;
		}
	SpinLockRelease(&guard_shared->mutex);

	if (everyone || ngone > MAX_TARGETED)
		sweep((Datum) 0, true);
	else if (ngone > 0)
	{
		Datum	   *d = palloc(sizeof(Datum) * ngone);

		for (k = 0; k < ngone; k++)
			d[k] = ObjectIdGetDatum(gone[k]);
		sweep(PointerGetDatum(construct_array(d, ngone, OIDOID, sizeof(Oid), true,
											  TYPALIGN_INT)), false);
	}
	if (known_roles != NULL)
		pfree(known_roles);
	known_roles = MemoryContextAlloc(TopMemoryContext, sizeof(Oid) * Max(nnow, 1));
	memcpy(known_roles, now, sizeof(Oid) * nnow);
	nknown_roles = nnow;
	jf_xact_commit();

	seen_dropped = published;
	sweep_everything = false;
	roles_looking = false;
}

/*
 * DROP ROLE committed: publish the roles for every worker of the cluster
 * (nothing here can fail).  A transaction that dropped more than it keeps
 * publishes that many more, which sends the workers to sweep every owner.
 */
static void
drop_xact_callback(XactEvent event, void *arg)
{
	int			i;

	if (event == XACT_EVENT_COMMIT && (ndropped_here > 0 || dropped_overflow) &&
		guard_shared != NULL)
	{
		SpinLockAcquire(&guard_shared->mutex);
		for (i = 0; i < ndropped_here; i++)
			guard_shared->dropped[guard_shared->ndropped++ % DROPPED_RING] = dropped_here[i];
		if (dropped_overflow)
			guard_shared->ndropped += DROPPED_RING + 1;
		SpinLockRelease(&guard_shared->mutex);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT)
	{
		ndropped_here = 0;
		dropped_overflow = false;
	}
}

static void
remember_dropped(List *oids)
{
	ListCell   *lc;

	if (!drop_callback)
	{
		RegisterXactCallback(drop_xact_callback, NULL);
		drop_callback = true;
	}
	foreach(lc, oids)
	{
		if (ndropped_here == MAX_DROPPED_LOCAL)
			dropped_overflow = true;
		else
			dropped_here[ndropped_here++] = lfirst_oid(lc);
	}
}

/* ----------------------------------------------------------------------
 * The utility hook
 * ---------------------------------------------------------------------- */

typedef struct AsOwner
{
	Oid			save_user;
	int			save_sec;
	int			nest;
} AsOwner;

/* The owner of the extension whose OID is ext. */
static Oid
extension_owner(Oid ext)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	Oid			owner = InvalidOid;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ext));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
		owner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return owner;
}

/*
 * Run the statements that follow as the extension's owner (row-level
 * security and column privileges are for tenants, not for these
 * bookkeeping statements), with a pinned search_path, and with triggers
 * off when replica is set.  False when jobflow is not installed here.
 */
static bool
as_owner_begin(AsOwner *s, bool replica)
{
	bool		isnull;
	Oid			owner;

	if (!OidIsValid(get_extension_oid("jobflow", true)))
		return false;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute("SELECT e.extowner FROM pg_catalog.pg_extension e"
					" WHERE e.extname OPERATOR(pg_catalog.=) 'jobflow'", true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read the owner of extension jobflow");
	owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	GetUserIdAndSecContext(&s->save_user, &s->save_sec);
	SetUserIdAndSecContext(owner, s->save_sec | SECURITY_LOCAL_USERID_CHANGE);
	s->nest = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (replica)
		(void) set_config_option("session_replication_role", "replica", PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	return true;
}

static void
as_owner_end(AsOwner *s)
{
	AtEOXact_GUC(true, s->nest);
	SetUserIdAndSecContext(s->save_user, s->save_sec);
	SPI_finish();
}

static int64
count_of(const char *sql, Oid role)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(role)};
	bool		isnull;

	if (SPI_execute_with_args(sql, OidIsValid(role) ? 1 : 0, types, values, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "counting jobflow tasks failed");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

#define COUNT_UNFINISHED \
	"SELECT pg_catalog.count(*) FROM jobflow.tasks t" \
	" WHERE t.state OPERATOR(pg_catalog.=) ANY ('{pending,running}')"
#define COUNT_ACTIVE_TIMERS \
	"SELECT pg_catalog.count(*) FROM jobflow.cron_timers c WHERE c.active"
#define OF_ROLE(col) " AND " col "::pg_catalog.oid OPERATOR(pg_catalog.=) $1"

/*
 * DROP EXTENSION jobflow: tasks that have not run and active timers would
 * go without a trace; refuse unless CASCADE, and say what CASCADE drops.
 */
static void
check_drop_extension(DropStmt *stmt)
{
	AsOwner		s;
	int64		unfinished;
	int64		timers;
	Oid			ext = get_extension_oid("jobflow", true);

	/*
	 * A role that may not drop it learns nothing: PostgreSQL refuses it
	 * next, and the counts are every tenant's.
	 */
	if (!OidIsValid(ext) || !has_privs_of_role(GetUserId(), extension_owner(ext)))
		return;
	/* the worker's transactions finish first, and the next ones wait */
	lock_serving(AccessExclusiveLock);
	if (!as_owner_begin(&s, false))
		return;
	unfinished = count_of(COUNT_UNFINISHED, InvalidOid);
	timers = count_of(COUNT_ACTIVE_TIMERS, InvalidOid);
	as_owner_end(&s);
	if (unfinished == 0 && timers == 0)
		return;
	if (stmt->behavior != DROP_CASCADE)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot drop extension jobflow because it has tasks that have not run"),
				 errdetail("Dropping it would lose %lld pending or running task(s) and %lld active cron timer(s) in database \"%s\".",
						   (long long) unfinished, (long long) timers,
						   get_database_name(MyDatabaseId)),
				 errhint("Cancel the tasks and pause the timers first, or use DROP EXTENSION jobflow CASCADE to drop them with it.")));
	ereport(WARNING,
			(errmsg("dropping %lld pending or running task(s) and %lld active cron timer(s) with extension jobflow",
					(long long) unfinished, (long long) timers),
			 errdetail("Their callbacks will not be made.")));
}

static bool
drops_jobflow(DropStmt *stmt)
{
	ListCell   *lc;

	if (stmt->removeType != OBJECT_EXTENSION)
		return false;
	foreach(lc, stmt->objects)
	{
		if (strcmp(strVal(lfirst(lc)), "jobflow") == 0)
			return true;
	}
	return false;
}

/* Oids of the roles named (those that exist). */
static List *
role_oids(List *specs)
{
	List	   *oids = NIL;
	ListCell   *lc;

	foreach(lc, specs)
	{
		Oid			oid = get_rolespec_oid((RoleSpec *) lfirst(lc), true);

		if (OidIsValid(oid))
			oids = lappend_oid(oids, oid);
	}
	return oids;
}

/* The roles' oids as an oid[] Datum. */
static Datum
oid_array(List *oids)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(list_length(oids), 1));
	ListCell   *lc;
	int			n = 0;

	foreach(lc, oids)
		d[n++] = ObjectIdGetDatum(lfirst_oid(lc));
	return PointerGetDatum(construct_array(d, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT));
}

/*
 * Delete the roles' secrets and signing secrets, and (but for REASSIGN
 * OWNED, which moves them) their configured queues, in the tables this
 * version of the schema has.  As the extension's owner (as_owner_begin),
 * with triggers on: the worker hears of the queues.
 */
static void
delete_of_roles(List *oids, bool keep_queues)
{
	static const char *const tables[] = {"secrets", "signing_secrets", "queues"};
	Oid			types[1] = {OIDARRAYOID};
	Datum		values[1] = {oid_array(oids)};
	Oid			nsp = get_namespace_oid("jobflow", false);
	int			i;

	for (i = 0; i < lengthof(tables) - (keep_queues ? 1 : 0); i++)
	{
		if (!OidIsValid(get_relname_relid(tables[i], nsp)))
			continue;
		if (SPI_execute_with_args(psprintf("DELETE FROM jobflow.%s x"
										   " WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)",
										   tables[i]),
								  1, types, values, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "deleting from jobflow.%s for dropped roles failed", tables[i]);
	}
}

/*
 * After DROP ROLE (in this transaction): refuse if a dropped role owns
 * tasks that have not run or active timers here.  Checked after the drop,
 * so that its own privilege checks come first.
 */
static void
check_dropped_roles(List *oids, List *names)
{
	AsOwner		s;
	ListCell   *lo;
	ListCell   *ln;

	if (oids == NIL || !as_owner_begin(&s, false))
		return;
	forboth(lo, oids, ln, names)
	{
		Oid			role = lfirst_oid(lo);
		int64		unfinished = count_of(COUNT_UNFINISHED OF_ROLE("t.owner"), role);
		int64		timers = count_of(COUNT_ACTIVE_TIMERS OF_ROLE("c.owner"), role);

		if (unfinished > 0 || timers > 0)
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("role \"%s\" cannot be dropped because it owns jobflow tasks that have not run",
							(char *) lfirst(ln)),
					 errdetail("It owns %lld pending or running task(s) and %lld active cron timer(s) in database \"%s\".",
							   (long long) unfinished, (long long) timers,
							   get_database_name(MyDatabaseId)),
					 errhint("Move them to another role with REASSIGN OWNED BY, or cancel them with DROP OWNED BY, before dropping the role.")));
	}
	/* what the role configured and kept secret goes with it */
	delete_of_roles(oids, false);
	as_owner_end(&s);
}

/*
 * DROP OWNED BY: cancel the roles' pending tasks, delete their timers,
 * configured queues, secrets and signing secrets.
 */
static void
drop_owned(List *oids)
{
	AsOwner		s;
	Oid			types[1] = {OIDARRAYOID};
	Datum		values[1];

	if (oids == NIL || !as_owner_begin(&s, false))
		return;
	values[0] = oid_array(oids);
	if (SPI_execute_with_args(
			"DELETE FROM jobflow.cron_timers c"
			" WHERE c.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)",
			1, types, values, NULL, false, 0) != SPI_OK_DELETE ||
		SPI_execute_with_args(
			"UPDATE jobflow.tasks t SET state = 'cancelled',"
			"       last_error = 'cancelled: DROP OWNED BY its role',"
			"       updated_at = pg_catalog.now()"
			" WHERE t.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)"
			"   AND t.state OPERATOR(pg_catalog.=) 'pending'",
			1, types, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "DROP OWNED BY on jobflow's tables failed");
	delete_of_roles(oids, false);
	as_owner_end(&s);
}

/*
 * REASSIGN OWNED BY, first part, with triggers on (the worker hears of
 * the queues): the roles' configured queues move to the new role, but for
 * the names it configured itself, whose configuration stays (and, of two
 * old roles' queues of one name, the one of the lower oid moves).  Their
 * secrets and signing secrets are deleted, not moved: a role gave them
 * for its own callbacks, and the new role never gave those values.
 */
static void
reassign_queues_and_secrets(List *oids, Oid newrole)
{
	AsOwner		s;
	Oid			types[2] = {OIDARRAYOID, OIDOID};
	Datum		values[2];
	List	   *old = NIL;
	ListCell   *lc;

	/* REASSIGN OWNED BY r TO r moves nothing */
	foreach(lc, oids)
		if (lfirst_oid(lc) != newrole)
			old = lappend_oid(old, lfirst_oid(lc));
	if (old == NIL || !as_owner_begin(&s, false))
		return;
	delete_of_roles(old, true);
	if (OidIsValid(get_relname_relid("queues", get_namespace_oid("jobflow", false))))
	{
		values[0] = oid_array(old);
		values[1] = ObjectIdGetDatum(newrole);
		if (SPI_execute_with_args(
				"DELETE FROM jobflow.queues x"
				" WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)"
				"   AND EXISTS (SELECT 1 FROM jobflow.queues y"
				"                WHERE y.name OPERATOR(pg_catalog.=) x.name"
				"                  AND (y.owner::pg_catalog.oid OPERATOR(pg_catalog.=) $2"
				"                       OR (y.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)"
				"                           AND y.owner::pg_catalog.oid OPERATOR(pg_catalog.<) x.owner::pg_catalog.oid)))",
				2, types, values, NULL, false, 0) != SPI_OK_DELETE ||
			SPI_execute_with_args(
				"UPDATE jobflow.queues x SET owner = $2::pg_catalog.regrole,"
				"       updated_at = pg_catalog.now()"
				" WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)",
				2, types, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "REASSIGN OWNED BY on jobflow.queues failed");
	}
	as_owner_end(&s);
}

/*
 * REASSIGN OWNED BY: tasks (finished ones too), their log rows and timers
 * move to the new role, as its other objects do, unless the new role is
 * one every tenant holds (a tenant may REASSIGN OWNED BY itself TO
 * jobflow_user).  Triggers are off: the owner of a finished task changes,
 * nothing else.
 */
static void
reassign_owned(List *oids, Oid newrole)
{
	AsOwner		s;
	Oid			types[2] = {OIDARRAYOID, OIDOID};
	Datum		values[2];
	int			n;
	/*
	 * Timers first: their UPDATE waits for a cron pass that holds them
	 * (it locks the timers it materialises), and each later statement
	 * takes a new snapshot, so the occurrences that pass created under the
	 * old owner move too.  From then on the pass skips the locked timers.
	 */
	static const char *const sql[] = {
		"UPDATE jobflow.cron_timers x SET owner = $2::pg_catalog.regrole"
		" WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)",
		"UPDATE jobflow.tasks x SET owner = $2::pg_catalog.regrole"
		" WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)",
		"UPDATE jobflow.task_log x SET owner = $2::pg_catalog.regrole"
		" WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)"
	};

	/* a role every tenant holds takes nothing (issue 20, item 4) */
	if (oids != NIL && OidIsValid(get_extension_oid("jobflow", true)))
		jf_check_owner_role(newrole);
	reassign_queues_and_secrets(oids, newrole);
	if (oids == NIL || !as_owner_begin(&s, true))
		return;
	values[0] = oid_array(oids);
	values[1] = ObjectIdGetDatum(newrole);
	for (n = 0; n < lengthof(sql); n++)
	{
		if (SPI_execute_with_args(sql[n], 2, types, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "REASSIGN OWNED BY on jobflow's tables failed");
	}
	as_owner_end(&s);
}

static void
jf_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
		   ProcessUtilityContext context, ParamListInfo params,
		   QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	List	   *oids = NIL;
	List	   *names = NIL;

	/* DROP DATABASE and the like: the worker there goes first */
	jf_launcher_utility_before(parsetree);
	/* PREPARE TRANSACTION: its wake-ups are kept under its GID */
	jf_prepared_utility_before(parsetree);

	switch (nodeTag(parsetree))
	{
		case T_DropStmt:
			if (drops_jobflow((DropStmt *) parsetree))
				check_drop_extension((DropStmt *) parsetree);
			break;
		case T_CopyStmt:
			if (is_restore_copy((CopyStmt *) parsetree))
				register_restorer();
			break;
		case T_DropRoleStmt:
			{
				ListCell   *lc;

				foreach(lc, ((DropRoleStmt *) parsetree)->roles)
				{
					RoleSpec   *spec = (RoleSpec *) lfirst(lc);
					Oid			oid = get_rolespec_oid(spec, true);

					if (OidIsValid(oid))
					{
						oids = lappend_oid(oids, oid);
						names = lappend(names, pstrdup(get_rolespec_name(spec)));
					}
				}
			}
			break;
		case T_DropOwnedStmt:
			oids = role_oids(((DropOwnedStmt *) parsetree)->roles);
			break;
		case T_ReassignOwnedStmt:
			oids = role_oids(((ReassignOwnedStmt *) parsetree)->roles);
			break;
		default:
			break;
	}

	if (prev_utility)
		prev_utility(pstmt, queryString, readOnlyTree, context, params,
					 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);

	/* CREATE or DROP EXTENSION, CREATE DATABASE: heard at commit */
	jf_launcher_utility_after(parsetree);
	/* COMMIT PREPARED: what its PREPARE kept wakes the worker now */
	jf_prepared_utility_after(parsetree);

	switch (nodeTag(parsetree))
	{
		case T_DropRoleStmt:
			check_dropped_roles(oids, names);
			/* the workers of every database look for them at commit */
			remember_dropped(oids);
			break;
		case T_DiscardStmt:
			/* a pooler hands the connection to someone else: no restore */
			if (((DiscardStmt *) parsetree)->target == DISCARD_ALL && mark != MARK_NONE)
				release_restorer();
			break;
		case T_DropOwnedStmt:
			drop_owned(oids);
			break;
		case T_ReassignOwnedStmt:
			reassign_owned(oids,
						   get_rolespec_oid(((ReassignOwnedStmt *) parsetree)->newrole, false));
			break;
		default:
			break;
	}
}

/* From _PG_init, in the postmaster: every backend inherits the hook. */
void
jf_guard_init(void)
{
	prev_utility = ProcessUtility_hook;
	ProcessUtility_hook = jf_utility;
#if PG_VERSION_NUM >= 150000
	prev_request = shmem_request_hook;
	shmem_request_hook = guard_shmem_request;
#else
	guard_shmem_request();
#endif
	prev_startup = shmem_startup_hook;
	shmem_startup_hook = guard_shmem_startup;
}
