/*-------------------------------------------------------------------------
 *
 * queues.c
 *	  The worker's copy of the queues' settings (jobflow.queues) in its
 *	  fair share.
 *
 * The worker reads the whole table at start; after that, the rows of the
 * queues a committed transaction changed, which the table's row trigger
 * names in shared memory before it sets the worker's latch
 * (api/changes.c, launcher/wake.c): a turn without changes costs a look
 * at shared memory, a change reaches the worker within a turn, and a
 * commit that changed no row costs nothing.  The SQL functions that
 * configure queues are api/queues.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "worker/queues.h"
#include "base/metrics.h"
#include "base/settings.h"
#include "worker/guard.h"
#include "worker/state.h"
#include "worker/xact.h"

/*
 * One row's settings (columns from first on: paused, max_concurrent,
 * max_per_second, priority, log_attempts, max_concurrent_per_key,
 * max_per_second_per_key, ordered) as the fair share takes them.  Limits
 * per key are not divided among several workers: all tasks of a key go to
 * one of them (state.h).
 */
static void
row_config(HeapTuple tup, TupleDesc desc, int first, JfFairQueueConfig *cfg)
{
	bool		isnull;
	Datum		d;

	memset(cfg, 0, sizeof(*cfg));
	cfg->paused = DatumGetBool(SPI_getbinval(tup, desc, first, &isnull));
	d = SPI_getbinval(tup, desc, first + 1, &isnull);
	/* with several workers, each takes its share (state.h) */
	cfg->max_concurrent = isnull ? 0 : jf_worker_share_cap(DatumGetInt32(d));
	d = SPI_getbinval(tup, desc, first + 2, &isnull);
	cfg->max_per_second = isnull ? 0 :
		DatumGetFloat8(d) / jobflow_workers_per_database;
	cfg->priority = DatumGetInt32(SPI_getbinval(tup, desc, first + 3, &isnull));
	d = SPI_getbinval(tup, desc, first + 4, &isnull);
	if (isnull)
		cfg->log = JF_FAIR_LOG_DEFAULT;
	else
	{
		char	   *log = TextDatumGetCString(d);

		/* the table's CHECK allows these two only */
		cfg->log = strcmp(log, "failures") == 0 ? JF_FAIR_LOG_FAILURES : JF_FAIR_LOG_ALL;
	}
	d = SPI_getbinval(tup, desc, first + 5, &isnull);
	cfg->max_concurrent_per_key = isnull ? 0 : DatumGetInt32(d);
	d = SPI_getbinval(tup, desc, first + 6, &isnull);
	cfg->max_per_second_per_key = isnull ? 0 : DatumGetFloat8(d);
	d = SPI_getbinval(tup, desc, first + 7, &isnull);
	cfg->ordered = !isnull && DatumGetBool(d);
}

static void
configure(JfWorkerState *ws, Oid owner, const char *name, const JfFairQueueConfig *cfg)
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
read_all(JfWorkerState *ws, bool *retention, bool *positive)
{
	uint64		i;

	jf_fair_reset_queues(ws->fair);
	if (SPI_execute("SELECT owner::oid, name, paused, max_concurrent, max_per_second,"
					"       priority, log_attempts, max_concurrent_per_key,"
					"       max_per_second_per_key, ordered, retention IS NOT NULL,"
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
		if (DatumGetBool(SPI_getbinval(tup, desc, 11, &isnull)))
		{
			Datum		d = SPI_getbinval(tup, desc, 12, &isnull);

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
read_keys(JfWorkerState *ws, const JfQueueKey *keys, int n, bool *retention, bool *positive)
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
							  "       q.max_concurrent, q.max_per_second, q.priority,"
							  "       q.log_attempts, q.max_concurrent_per_key,"
							  "       q.max_per_second_per_key, q.ordered"
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
 * committed transactions named (api/changes.c), or the whole table at start,
 * after the extension was created again, when more changed than shared
 * memory names, or with force.  The version is read before the keys are
 * taken, so a commit after the read is read next turn.  An error leaves
 * the version unseen and the view unloaded: the next turn reads it all.
 */
bool
jf_queues_refresh(JfWorkerState *ws, bool force)
{
	uint64		version = pg_atomic_read_u64(&jf_my_slot->queues_version);
	uint32		generation = jf_guard_generation();
	JfQueueKey *keys = palloc(sizeof(JfQueueKey) * JF_WAKE_QUEUES);
	int			nkeys = 0;
	Oid			nsp;
	bool		all;
	bool		retention = false;
	bool		positive = false;
	bool		reset_mark;
	int			i;

	SpinLockAcquire(&jf_my_slot->wake_mutex);
	for (i = 0; i < jf_my_slot->nqueue_wakes; i++)
		if (jf_my_slot->queue_wakes[i].dboid == MyDatabaseId)
			keys[nkeys++] = jf_my_slot->queue_wakes[i];
	jf_my_slot->nqueue_wakes = 0;
	SpinLockRelease(&jf_my_slot->wake_mutex);

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
jf_queues_retention_overrides(JfWorkerState *ws, bool *positive)
{
	*positive = ws->queues.any_positive_retention;
	return ws->queues.any_retention;
}

/*
 * Whether a success at the first attempt of a task in lane (its named
 * queue's, or else jobflow.log_attempts) is written to jobflow.task_log.
 */
bool
jf_queues_log_first_success(JfWorkerState *ws, uint32 lane)
{
	switch (jf_fair_lane_log(ws->fair, lane))
	{
		case JF_FAIR_LOG_ALL:
			return true;
		case JF_FAIR_LOG_FAILURES:
			return false;
		case JF_FAIR_LOG_DEFAULT:
			break;
	}
	return jobflow_log_attempts != JF_LOG_ATTEMPTS_FAILURES;
}
