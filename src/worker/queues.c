/*-------------------------------------------------------------------------
 *
 * queues.c
 *	  Queues as objects: the SQL functions that configure jobflow.queues,
 *	  and the worker's copy of their settings in the fair share.
 *
 * A queue is named per owner (jobflow.tasks.queue); a row of
 * jobflow.queues pauses it, limits it (requests in flight, a dispatch
 * rate), gives it a priority and a retention.  Tenants may read their own
 * rows only and write none: pause_queue(), resume_queue(), set_queue() and
 * drop_queue() check the caller, who may configure its own queues (or,
 * for members of jobflow_admin and superusers, any owner's), and write as
 * the table's owner (as_owner.h).
 *
 * The worker reads the whole table at start; after that, the rows of the
 * queues a committed transaction changed, which the table's row trigger
 * names in shared memory before it sets the worker's latch (changes.c): a
 * turn without changes costs a look at shared memory, a change reaches the
 * worker within a turn, and a commit that changed no row costs nothing.
 * Each role may configure at most jobflow.max_queues_per_role queues
 * (quota.c).
 *
 *-------------------------------------------------------------------------
 */
#include "worker/worker.h"

#include "api/as_owner.h"
#include "api/tenant_api.h"
#include "worker/guard.h"
#include "api/quota.h"
#include "api/task_check.h"
#include "worker/xact.h"

#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "worker/queues.h"

#include <math.h>

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
	jobflow_check_queue_name(name);
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
	Oid			types[8] = {REGROLEOID, TEXTOID};
	Datum		values[8];
	char		nulls[8] = {' ', ' '};
	JfAsOwner	as_owner;
	uint64		n;
	int			ret;
	int			i;

	Assert(nextra <= 6);
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
 * retention, owner) RETURNS void: the queue's whole configuration, each
 * argument left out going back to its default (no limit, priority 0,
 * jobflow.retention); whether it is paused does not change.
 */
PG_FUNCTION_INFO_V1(jobflow_set_queue);
Datum
jobflow_set_queue(PG_FUNCTION_ARGS)
{
	text	   *name = queue_name(fcinfo);
	Oid			owner = queue_owner(fcinfo, 5);
	Oid			types[4] = {INT4OID, FLOAT8OID, INT4OID, INTERVALOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

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
	jf_quota_check(JF_QUOTA_QUEUES, owner, text_to_cstring(name));
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

/*
 * One row's settings (columns from first on: paused, max_concurrent,
 * max_per_second, priority) as the fair share takes them.
 */
static void
row_config(HeapTuple tup, TupleDesc desc, int first, JfFairQueueConfig *cfg)
{
	bool		isnull;
	Datum		d;

	memset(cfg, 0, sizeof(*cfg));
	cfg->paused = DatumGetBool(SPI_getbinval(tup, desc, first, &isnull));
	d = SPI_getbinval(tup, desc, first + 1, &isnull);
	/* with several workers, each takes its share (jobflow.h) */
	cfg->max_concurrent = isnull ? 0 : jf_worker_share_cap(DatumGetInt32(d));
	d = SPI_getbinval(tup, desc, first + 2, &isnull);
	cfg->max_per_second = isnull ? 0 :
		DatumGetFloat8(d) / jobflow_workers_per_database;
	cfg->priority = DatumGetInt32(SPI_getbinval(tup, desc, first + 3, &isnull));
}

static void
configure(WorkerState *ws, Oid owner, const char *name, const JfFairQueueConfig *cfg)
{
	if (!jf_fair_configure(ws->fair, owner, name, cfg))
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory applying jobflow queue settings")));
}

/*
 * The whole table: at start, after the extension was created again, and
 * when more queues changed than shared memory names.  Sets whether some
 * queue has a retention of its own (and one that prunes).
 */
static void
read_all(WorkerState *ws, bool *retention, bool *positive)
{
	uint64		i;

	jf_fair_reset_queues(ws->fair);
	if (SPI_execute("SELECT owner::oid, name, paused, max_concurrent, max_per_second,"
					"       priority, retention IS NOT NULL,"
					"       retention > interval '0'"
					"  FROM jobflow.queues", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read jobflow.queues");
	jf_xact_count_statements(1);
	jf_metrics_count(JF_COUNT_QUEUE_READS, 1);
	jf_metrics_count(JF_COUNT_QUEUE_ROWS, SPI_processed);
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Oid			owner = DatumGetObjectId(SPI_getbinval(tup, desc, 1, &isnull));
		char	   *name = TextDatumGetCString(SPI_getbinval(tup, desc, 2, &isnull));
		JfFairQueueConfig cfg;

		row_config(tup, desc, 3, &cfg);
		if (DatumGetBool(SPI_getbinval(tup, desc, 7, &isnull)))
		{
			Datum		d = SPI_getbinval(tup, desc, 8, &isnull);

			*retention = true;
			*positive |= !isnull && DatumGetBool(d);
		}
		configure(ws, owner, name, &cfg);
	}
}

/*
 * The rows of the queues committed transactions changed, by primary key:
 * a queue whose row is gone goes back to no configuration.  Whether any
 * queue has a retention of its own is asked of the partial index on
 * retention, which holds only those queues.
 */
static void
read_keys(WorkerState *ws, const JfQueueKey *keys, int n, bool *retention, bool *positive)
{
	Oid			types[2] = {OIDARRAYOID, TEXTARRAYOID};
	Datum		values[2];
	Datum	   *owners = palloc(sizeof(Datum) * n);
	Datum	   *names = palloc(sizeof(Datum) * n);
	uint64		i;
	int			k;
	bool		isnull;
	uint64		found = 0;

	for (k = 0; k < n; k++)
	{
		owners[k] = ObjectIdGetDatum(keys[k].owner);
		names[k] = CStringGetTextDatum(keys[k].name);
	}
	values[0] = PointerGetDatum(construct_array(owners, n, OIDOID, sizeof(Oid), true,
												TYPALIGN_INT));
	values[1] = PointerGetDatum(construct_array(names, n, TEXTOID, -1, false, TYPALIGN_INT));
	if (SPI_execute_with_args("SELECT k.owner, k.name, q.name IS NOT NULL, q.paused,"
							  "       q.max_concurrent, q.max_per_second, q.priority"
							  "  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2))"
							  "         AS k(owner, name)"
							  "  LEFT JOIN jobflow.queues q"
							  "    ON q.owner::pg_catalog.oid = k.owner AND q.name = k.name",
							  2, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read jobflow.queues");
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		Oid			owner = DatumGetObjectId(SPI_getbinval(tup, desc, 1, &isnull));
		char	   *name = TextDatumGetCString(SPI_getbinval(tup, desc, 2, &isnull));
		JfFairQueueConfig cfg;

		if (DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull)))
		{
			row_config(tup, desc, 4, &cfg);
			found++;
		}
		else
			memset(&cfg, 0, sizeof(cfg));
		configure(ws, owner, name, &cfg);
	}
	if (SPI_execute("SELECT EXISTS (SELECT FROM jobflow.queues q WHERE q.retention IS NOT NULL),"
					"       EXISTS (SELECT FROM jobflow.queues q WHERE q.retention IS NOT NULL"
					"                  AND q.retention > interval '0')", true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read the retentions of jobflow.queues");
	*retention = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*positive = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	jf_xact_count_statements(2);
	jf_metrics_count(JF_COUNT_QUEUE_READS, 1);
	jf_metrics_count(JF_COUNT_QUEUE_ROWS, found);
}

/*
 * Read what changed in jobflow.queues into the fair share: the queues
 * committed transactions named (changes.c), or the whole table at start,
 * after the extension was created again, when more changed than shared
 * memory names, or with force.  The version is read before the keys are
 * taken, so a commit after the read is read next turn.  An error leaves
 * the version unseen and the view unloaded: the next turn reads it all.
 */
bool
jf_queues_refresh(WorkerState *ws, bool force)
{
	uint64		version = pg_atomic_read_u64(&jobflow_shared->queues_version);
	uint32		generation = jf_guard_generation();
	JfQueueKey *keys = palloc(sizeof(JfQueueKey) * JF_WAKE_QUEUES);
	int			nkeys = 0;
	Oid			nsp;
	bool		all;
	bool		retention = false;
	bool		positive = false;
	bool		reset_mark;
	int			i;

	SpinLockAcquire(&jobflow_shared->wake_mutex);
	for (i = 0; i < jobflow_shared->nqueue_wakes; i++)
		if (jobflow_shared->queue_wakes[i].dboid == MyDatabaseId)
			keys[nkeys++] = jobflow_shared->queue_wakes[i];
	jobflow_shared->nqueue_wakes = 0;
	SpinLockRelease(&jobflow_shared->wake_mutex);

	all = force || !ws->queues.loaded || version != ws->queues.seen_version ||
		generation != ws->queues.seen_generation;
	if (!all && nkeys == 0)
		return false;
	ws->queues.loaded = false;
	jf_xact_begin("jobflow: reading queue settings");
	nsp = get_namespace_oid("jobflow", true);
	/* before ALTER EXTENSION jobflow UPDATE to 0.2.0 there is no table */
	if (!OidIsValid(nsp) || !OidIsValid(get_relname_relid("queues", nsp)))
		jf_fair_reset_queues(ws->fair);
	else if (all)
		read_all(ws, &retention, &positive);
	else
		read_keys(ws, keys, nkeys, &retention, &positive);
	jf_xact_commit();
	/* tasks the default retention passed over may be due for pruning now */
	reset_mark = retention != ws->queues.any_retention || retention;
	ws->queues.any_retention = retention;
	ws->queues.any_positive_retention = positive;
	ws->queues.seen_version = version;
	ws->queues.seen_generation = generation;
	ws->queues.loaded = true;
	/* a resumed queue's parked tasks go now */
	SetLatch(MyLatch);
	return reset_mark;
}

/*
 * Whether some queue has a retention of its own; *positive: one that
 * prunes (not 0, keep everything).
 */
bool
jf_queues_retention_overrides(WorkerState *ws, bool *positive)
{
	*positive = ws->queues.any_positive_retention;
	return ws->queues.any_retention;
}
