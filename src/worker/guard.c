/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  The worker's guards: the extension incarnation it serves, restores
 *	  and sequences that hold it back, and the sweep of what dropped roles
 *	  left.
 *
 * The worker claims and materialises nothing while a restore is in
 * progress in its database (launcher/restore.c) or a sequence of jobflow
 * is behind its table (its ids would collide with rows still to come),
 * and never fires a task whose owner no longer exists (DROP ROLE may run
 * in any database): the claim skips them, and a sweep cancels them,
 * pauses such timers and deletes the roles' queues and secrets.  The
 * sweep is for the roles gone since the worker last looked (those
 * dropping transactions published, launcher/dropped_roles.c, and those
 * pg_authid no longer has), and the worker looks at most once per
 * jobflow.reconcile_interval after pg_authid changed: a role changing its
 * own password in a loop costs a read of pg_authid an interval, and no
 * sweep.  Every worker transaction first locks the extension it serves
 * (jf_guard_check_incarnation): if that extension was dropped, the
 * transaction fails before touching anything, and the worker forgets
 * what it held for it (outcomes in flight included); it serves a new
 * CREATE EXTENSION there, or exits and frees its slot.
 *
 * jobflow.dispatch holds the worker: off, always; auto, while its database
 * subscribes to jobflow's tables by logical replication (a copy that a
 * blue/green move fills, whose tasks the old primary fires).  Holding, it
 * claims nothing, materialises nothing, prunes and sweeps nothing: the
 * rows are the publisher's until the subscription is dropped.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "worker/guard.h"
#include "base/locks.h"
#include "base/metrics.h"
#include "base/settings.h"
#include "launcher/dropped_roles.h"
#include "launcher/restore.h"
#include "worker/state.h"
#include "worker/xact.h"

/* more roles gone than this at one look: one sweep of every owner */
#define MAX_TARGETED 1000

static Oid	served_ext = InvalidOid;
static uint32 generation = 0;
static bool lost = false;
static bool roles_changed = true;	/* pg_authid changed since the last look */
static bool roles_looking = false;	/* a look began and did not finish */
static bool sweep_everything = true;	/* at start: every owner gone */
static int64 next_look_ms = 0;	/* one look per jobflow.reconcile_interval */
static Oid *known_roles = NULL;	/* pg_authid at the last look, sorted */
static int	nknown_roles = 0;
static uint64 seen_dropped = 0; /* roles published, at the last look */
static bool roles_callback = false;

/* jobflow.dispatch: why the worker holds, and when it looks again */
#define HOLD_LOOK_GAP_MS 100
static JfHold hold = JF_HOLD_NONE;
static int64 hold_look_ms = 0;
static int64 hold_looked_ms = 0;

/* ----------------------------------------------------------------------
 * jobflow.dispatch: off, or a subscriber of jobflow's tables
 * ---------------------------------------------------------------------- */

/*
 * Whether this database receives jobflow's tables by logical replication:
 * a subscription of the database (enabled or not) whose tables include one
 * of schema jobflow.  Only a subscription whose owner could write that
 * table anyway counts: a superuser's, or one of a role with the privileges
 * of the table's owner.  From PostgreSQL 16 on, a role granted
 * pg_create_subscription can create a subscription to a publication of
 * its own making, whose tables name jobflow's; such a subscription cannot
 * write them, and must not hold every tenant's callbacks either.  Runs in
 * its own transaction.  A look starts from the relations of schema
 * jobflow (pg_depend's index on the schema) and probes pg_subscription_rel
 * by its index for each: its cost does not grow with the tables other
 * subscriptions, or the same one, bring (a blue/green move subscribes to
 * every table, and a tenant's own subscription, above, may list many),
 * while a held worker looks up to ten times a second.
 */
static bool
subscribed(void)
{
	Oid			types[2] = {OIDOID, OIDOID};
	Datum		values[2];
	bool		isnull;
	bool		found;
	int			ret;

	jf_xact_begin("jobflow: look for subscriptions to jobflow's tables");
	values[0] = ObjectIdGetDatum(MyDatabaseId);
	values[1] = ObjectIdGetDatum(get_namespace_oid("jobflow", true));
	ret = SPI_execute_with_args(
		"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d"
		"  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid"
		"  JOIN pg_catalog.pg_subscription_rel r ON r.srrelid OPERATOR(pg_catalog.=) d.objid"
		"  JOIN pg_catalog.pg_subscription s ON s.oid OPERATOR(pg_catalog.=) r.srsubid"
		" WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass"
		"   AND d.refobjid OPERATOR(pg_catalog.=) $2"
		"   AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
		"   AND c.relnamespace OPERATOR(pg_catalog.=) $2"
		"   AND s.subdbid OPERATOR(pg_catalog.=) $1"
		"   AND (EXISTS (SELECT 1 FROM pg_catalog.pg_authid a"
		"                 WHERE a.oid OPERATOR(pg_catalog.=) s.subowner AND a.rolsuper)"
		"        OR pg_catalog.pg_has_role(s.subowner, c.relowner, 'USAGE')))",
		2, types, values, NULL, true, 1);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "reading pg_subscription_rel failed: %s", SPI_result_code_string(ret));
	found = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	jf_xact_count_statements(1);
	jf_xact_commit();
	return found;
}

/*
 * Why the worker holds by jobflow.dispatch, looking at the subscriptions
 * when the setting is auto and a look is due: at least once a
 * jobflow.reconcile_interval, after a reload or a change of subscriptions
 * in the database (jf_guard_look_soon), and while it holds for a
 * subscription, at every turn of the loop (a NOTIFY jobflow wakes it) but
 * at most every HOLD_LOOK_GAP_MS.  Holding, the worker claims nothing and
 * writes nothing to jobflow's tables of its own.
 */
JfHold
jf_guard_hold(int64 now_ms)
{
	if (jobflow_dispatch == JF_DISPATCH_OFF)
		hold = JF_HOLD_OFF;
	else if (jobflow_dispatch == JF_DISPATCH_ON)
		hold = JF_HOLD_NONE;
	else
	{
		if (hold == JF_HOLD_OFF)
			hold_look_ms = 0;	/* was off: look now */
		if (now_ms >= hold_look_ms ||
			(hold == JF_HOLD_SUBSCRIBED && now_ms >= hold_looked_ms + HOLD_LOOK_GAP_MS))
		{
			hold_looked_ms = now_ms;
			hold_look_ms = now_ms + jobflow_reconcile_ms;
			/*
			 * Held until the look says otherwise: a look that fails with an
			 * error leaves the worker held, and is made again
			 * HOLD_LOOK_GAP_MS later, rather than letting a subscriber fire
			 * until the next jobflow.reconcile_interval.
			 */
			hold = JF_HOLD_SUBSCRIBED;
			hold = subscribed() ? JF_HOLD_SUBSCRIBED : JF_HOLD_NONE;
		}
	}
	return hold;
}

/* Look at the subscriptions at the next jf_guard_hold. */
void
jf_guard_look_soon(void)
{
	hold_look_ms = 0;
}

/* When the loop must wake for the next look (INT64_MAX: no need). */
int64
jf_guard_hold_deadline(void)
{
	return jobflow_dispatch == JF_DISPATCH_AUTO ? hold_look_ms : PG_INT64_MAX;
}

/*
 * Whether a sequence of jobflow would hand out an id already in use: the
 * state between a restore's COPY and its setval, or after a data-only
 * restore that left the sequences out.  Runs in the caller's transaction,
 * with SPI connected.
 */
static bool
sequences_lag(void)
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
	if (hold != JF_HOLD_NONE || jf_restore_in_progress())
		return false;
	*sequences_behind = sequences_lag();
	return !*sequences_behind;
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
		jf_lock_serving(AccessShareLock);
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
 * cancelled, their timers paused, their configured queues, secrets,
 * signing secrets and client certificates deleted (the claim never sends
 * their tasks meanwhile).
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
	(void) sweep_table("client_certificates",
					   "DELETE FROM jobflow.client_certificates x WHERE true%s" NO_ROLE_LEFT,
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
	Oid			dropped[JF_DROPPED_RING];
	int			ndropped;
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

	gone = palloc(sizeof(Oid) * (nknown_roles + JF_DROPPED_RING + 1));
	for (k = 0; k < nknown_roles; k++)
		if (!bsearch(&known_roles[k], now, nnow, sizeof(Oid), compare_oid))
			gone[ngone++] = known_roles[k];
	published = seen_dropped;
	ndropped = jf_dropped_roles_since(&published, dropped);
	if (ndropped < 0)
		everyone = true;
	for (k = 0; k < ndropped; k++)
		if (!bsearch(&dropped[k], now, nnow, sizeof(Oid), compare_oid))
			gone[ngone++] = dropped[k];

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
