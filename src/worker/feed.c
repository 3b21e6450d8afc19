/*-------------------------------------------------------------------------
 *
 * feed.c
 *	  Keeps the worker's time wheel in step with jobflow.tasks.
 *
 * The table is the truth; the wheel is a cache of the pending tasks due
 * before loaded_until_ms.  Three paths fill it:
 *
 *	- at start, every pending task due within the horizon, in due order;
 *	- wake-ups, published at commit by the statement trigger of
 *	  jobflow.tasks with the range of ids each statement touched, for
 *	  tasks due within three reconcile intervals: the worker loads those
 *	  rows by primary key;
 *	- housekeeping every jobflow.reconcile_interval: extends the horizon,
 *	  and rescans the next two intervals, which loads the tasks that did
 *	  not notify at least an interval before they are due, and whatever a
 *	  lost notification or a queue overflow missed.
 *
 * Committing transactions hand the id ranges of their tasks to the worker
 * through shared memory and set its latch (jf_publish_wake); NOTIFY
 * jobflow (sent by CREATE EXTENSION, or by anyone) only wakes it.
 * Background workers cannot use LISTEN's normal delivery, so the worker
 * calls Async_Listen itself and, between transactions, drains the queue
 * with ProcessNotifyInterrupt while PqCommMethods points at a capture
 * function that discards what it is sent.  Draining after every wake keeps
 * the cluster-wide notification queue from filling, whatever the rate of
 * notifications.
 *
 * A task id maps to at most one wheel entry (the taskmap), so loading a
 * task twice, or rescheduling it, replaces its entry.  A stale entry can
 * only make the claim statement find nothing: it never fires a task early.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "executor/spi.h"
#include "libpq/libpq.h"
#include "miscadmin.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "worker/feed.h"
#include "base/fault.h"
#include "core/hash.h"
#include "worker/cron.h"
#include "worker/guard.h"
#include "worker/log_writer.h"
#include "worker/state.h"
#include "worker/xact.h"

/* task id -> wheel handle, or parked in its fair-share queue: 24 bytes */
typedef struct TaskMapEntry
{
	int64		id;
	uint32		handle;			/* unless parked */
	uint32		queue;
	char		status;
	bool		parked;			/* due, waiting in jf_fair for a place */
} TaskMapEntry;

#define SH_PREFIX taskmap
#define SH_ELEMENT_TYPE TaskMapEntry
#define SH_KEY_TYPE int64
#define SH_KEY id
#define SH_HASH_KEY(tb, key) jf_hash64((uint64) (key))
#define SH_EQUAL(tb, a, b) ((a) == (b))
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

/* most id ranges waiting to be loaded before falling back to a rescan */
#define MAX_PENDING_RANGES 8192
/* widest id range of one statement loaded by primary key, a chunk a turn */
#define MAX_RANGE_WIDTH 1000000
/* most ids loaded by primary key per turn */
#define LOAD_CHUNK 10000
/* running tasks another transaction holds locked: looked at again then */
#define STRAYS_RETRY_MS 1000
/* rows fetched per cursor round trip when loading */
#define LOAD_FETCH 10000
/* a due task whose row another transaction holds is tried again after */
#define LOCKED_RETRY_MS 500
/* every so many rescans, overdue tasks of any age are rescanned too */
#define FULL_RESCAN_EVERY 12
/* retries of ordered keys checked at most per housekeeping */
#define WAITED_HEADS_MAX 1000
/* a key blocked by a dead letter tries the claim again after this long */
#define DEAD_LETTER_WAIT_US ((int64) 600 * 1000 * 1000)
/* what a load query returns */
#define LOAD_COLUMNS "t.id, t.run_at, t.owner, t.url, t.queue, t.cron_id IS NOT NULL," \
	" t.flow_key, " JF_ROUTE_SQL

static void load_rows(JfWorkerState *ws, const char *sql, int nargs, Oid *types,
					  Datum *values);

static void
capture_comm_reset(void)
{
}

static int
capture_flush(void)
{
	return 0;
}

static bool
capture_is_send_pending(void)
{
	return false;
}

/*
 * Receives what the backend would send a client: NotificationResponses on
 * channel jobflow.  Any role may NOTIFY, so a notification is only ever a
 * wake-up, and what it says is ignored: the ranges to load come through
 * shared memory from the committing transactions themselves (see
 * jf_feed_take_wakeups).  Draining costs no statement.
 */
static int
capture_putmessage(char msgtype, const char *s, size_t len)
{
	return 0;
}

static void
capture_putmessage_noblock(char msgtype, const char *s, size_t len)
{
	(void) capture_putmessage(msgtype, s, len);
}

static const PQcommMethods capture_methods = {
	capture_comm_reset,
	capture_flush,
	capture_flush,
	capture_is_send_pending,
	capture_putmessage,
	capture_putmessage_noblock
};

void
jf_feed_init(JfWorkerState *ws)
{
	ws->wheel = jf_wheel_create(jf_now_ms(), JF_WHEEL_HORIZON_MS, 0);
	if (ws->wheel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory creating the jobflow time wheel")));
	ws->map = taskmap_create(ws->cxt, 1024, NULL);
	ws->loaded_until_ms = PG_INT64_MIN;
	ws->announced.lo = MemoryContextAlloc(ws->cxt, sizeof(int64) * MAX_PENDING_RANGES);
	ws->announced.hi = MemoryContextAlloc(ws->cxt, sizeof(int64) * MAX_PENDING_RANGES);
}

/*
 * The extension was dropped: every id the wheel, the map, the announced
 * ranges and the parked queues hold names a row of tables that are gone,
 * and the ids of the new ones start at 1 again.
 */
void
jf_feed_forget_all(JfWorkerState *ws)
{
	jf_wheel_destroy(ws->wheel);
	ws->wheel = jf_wheel_create(jf_now_ms(), JF_WHEEL_HORIZON_MS, 0);
	if (ws->wheel == NULL)
		ereport(FATAL,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory creating the jobflow time wheel")));
	taskmap_reset(ws->map);
	if (ws->fair != NULL)
		jf_fair_drop_parked(ws->fair);
	ws->announced.n = 0;
}

/* LISTEN before the first scan, so no commit falls between the two. */
void
jf_feed_listen(void)
{
	StartTransactionCommand();
	Async_Listen(JOBFLOW_CHANNEL);
	CommitTransactionCommand();
}

/*
 * Put a task in the wheel, replacing its entry if it has one.  A task due
 * beyond the wheel's reach stays in the table for a later horizon scan.
 */
void
jf_feed_upsert(JfWorkerState *ws, int64 id, int64 due_ms, uint32 queue)
{
	bool		found;
	TaskMapEntry *e = taskmap_insert(ws->map, id, &found);
	uint32		handle;
	JfWheelStatus st;

	if (found && !e->parked)
		(void) jf_wheel_cancel(ws->wheel, e->handle, (uint64) id);
	st = jf_wheel_insert(ws->wheel, (uint64) id, due_ms, &handle);
	/* the map's entry holds its lane, so that the lane is not collected */
	if (found)
		jf_fair_unhold(ws->fair, e->queue);
	if (st == JF_WHEEL_OK)
	{
		jf_fair_hold(ws->fair, queue);
		e->handle = handle;
		e->queue = queue;
		e->parked = false;
		return;
	}
	taskmap_delete_item(ws->map, e);
	if (st == JF_WHEEL_NO_MEMORY || st == JF_WHEEL_FULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("jobflow time wheel is out of memory")));
}

/*
 * jf_fair_compact's question: is this copy still the task's (parked, in
 * this lane)?  Asked before the task being parked is pushed, so that its
 * own older copies there count as stale.
 */
static bool
parked_here(uint64 id, uint32 queue, void *arg)
{
	JfWorkerState *ws = (JfWorkerState *) arg;
	TaskMapEntry *e = taskmap_lookup(ws->map, (int64) id);

	return e != NULL && e->parked && e->queue == queue;
}

/*
 * The task's wheel entry fell due: park it in its fair-share queue until
 * there is a place for it.  It stays in the map, marked parked, so loads
 * leave it alone unless it was rescheduled.  Copies that tasks moved away
 * left in the lane go first when they are most of it (a paused lane would
 * keep them all).
 */
bool
jf_feed_park(JfWorkerState *ws, int64 id, int64 due_ms)
{
	TaskMapEntry *e = taskmap_lookup(ws->map, id);

	if (e == NULL || e->parked)
		return false;
	if (jf_fair_stale_heavy(ws->fair, e->queue))
		(void) jf_fair_compact(ws->fair, e->queue, parked_here, ws);
	if (!jf_fair_push(ws->fair, e->queue, (uint64) id, due_ms))
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory parking due jobflow tasks")));
	e->parked = true;
	return true;
}

/*
 * jf_fair_pick's question for each parked id: is it still parked (not
 * moved back into the wheel by a reschedule, not taken already), and in
 * this lane?  A task moved to another named queue while parked leaves a
 * stale copy in its old lane, which must not send it under the old
 * queue's limits (past the new one's pause, say).  Taking it removes it
 * from the map: from here on the claim decides.
 */
bool
jf_feed_take(uint64 id, uint32 queue, void *arg)
{
	JfWorkerState *ws = (JfWorkerState *) arg;
	TaskMapEntry *e = taskmap_lookup(ws->map, (int64) id);

	if (e == NULL || !e->parked || e->queue != queue)
		return false;
	/* the pick counts it claimed in its lane before the next collect */
	jf_fair_unhold(ws->fair, e->queue);
	taskmap_delete_item(ws->map, e);
	return true;
}

/*
 * The (owner, named queue, origin, flow key) lane of a loaded row (columns
 * as LOAD_COLUMNS).
 */
static uint32
row_queue(JfWorkerState *ws, HeapTuple tup, TupleDesc desc)
{
	bool		isnull;
	Oid			owner = DatumGetObjectId(SPI_getbinval(tup, desc, 3, &isnull));
	char	   *url = TextDatumGetCString(SPI_getbinval(tup, desc, 4, &isnull));
	char	   *name = TextDatumGetCString(SPI_getbinval(tup, desc, 5, &isnull));
	Datum		key = SPI_getbinval(tup, desc, 7, &isnull);
	char	   *flow_key = isnull ? NULL : TextDatumGetCString(key);
	uint32		queue = jf_fair_queue_key(ws->fair, owner, name, url, flow_key);

	pfree(url);
	pfree(name);
	if (flow_key != NULL)
		pfree(flow_key);
	if (queue == UINT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory queueing jobflow tasks by host")));
	return queue;
}

/*
 * Put one loaded row in the wheel.  A task already in the wheel at its
 * run_at and in its lane is left alone (rescans must not churn entries),
 * and so is one parked in its lane while it is still due; one whose run_at
 * or lane (named queue, origin) moved, announced or not, gets its entry
 * moved.  A parked task moved out of a paused queue would otherwise wait
 * in that queue's lane, behind its pause, until someone resumed it.
 */
static void
load_tuple(JfWorkerState *ws, HeapTuple tup, TupleDesc desc, int64 now_ms)
{
	bool		isnull;
	int64		id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	TimestampTz run_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 2, &isnull));
	int64		due = jf_ts_to_due_ms(run_at);
	TaskMapEntry *e;
	uint32		lane;

	/* another worker's (jobflow.workers_per_database) */
	if (!jf_worker_owns(DatumGetInt64(SPI_getbinval(tup, desc, 8, &isnull)),
						DatumGetBool(SPI_getbinval(tup, desc, 6, &isnull))))
		return;
	e = taskmap_lookup(ws->map, id);
	lane = row_queue(ws, tup, desc);
	if (e != NULL && e->queue == lane &&
		(e->parked ? due <= now_ms : jf_wheel_due(ws->wheel, e->handle, (uint64) id) == due))
		return;
	jf_feed_upsert(ws, id, due, lane);
}

/*
 * Picked tasks that the claim did not take: cancelled or rescheduled ones
 * are simply gone, but one whose row another transaction holds (SKIP
 * LOCKED) is still pending and due, and goes back into the wheel for a
 * little later, so that no rescan is needed to find it.  Inside the
 * claim's transaction.
 */
void
jf_feed_recheck(JfWorkerState *ws, Datum ids, int64 now_ms)
{
	Oid			types[1] = {INT8ARRAYOID};
	Datum		values[1] = {ids};
	uint64		i;
	int			ret;

	ret = SPI_execute_with_args("SELECT " LOAD_COLUMNS ", b.id, b.state::pg_catalog.text, b.run_at"
								"  FROM jobflow.tasks t"
								"  LEFT JOIN LATERAL ("
								"       SELECT p.id, p.state, p.run_at"
								"         FROM jobflow.queues o, jobflow.tasks p"
								"        WHERE t.flow_key IS NOT NULL"
								"          AND o.owner = t.owner AND o.name = t.queue AND o.ordered"
								"          AND " JF_FLOW_EARLIER_SQL("p", "t", "o")
								"        ORDER BY p.flow_at, p.id LIMIT 1) b ON true"
								" WHERE t.id = ANY($1) AND " JF_PENDING_SQL("t"),
								1, types, values, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "recheck of unclaimed tasks failed: %s", SPI_result_code_string(ret));
	jf_xact_count_statements(1);
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		bool		isnull;
		int64		id = DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull));
		int64		due = jf_ts_to_due_ms(DatumGetTimestampTz(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull)));

		uint32		lane;
		int64		later = LOCKED_RETRY_MS;
		bool		found;

		if (taskmap_lookup(ws->map, id) != NULL)
			continue;
		lane = row_queue(ws, tup, SPI_tuptable->tupdesc);
		/*
		 * A task of an ordered queue's key behind an earlier one still
		 * unfinished (maybe only until its outcome is written, within a
		 * flush interval) or failed: it goes back to the head of its lane,
		 * before the key's later tasks, and the key backs off, from a few
		 * milliseconds on, so that it goes soon after the earlier one is
		 * done, and a key blocked for long costs little.
		 */
		if (jf_fair_lane_ordered(ws->fair, lane))
		{
			TaskMapEntry *e = taskmap_insert(ws->map, id, &found);

			Datum		b = SPI_getbinval(tup, SPI_tuptable->tupdesc, 9, &isnull);
			uint64		blocker = isnull ? 0 : (uint64) DatumGetInt64(b);
			char	   *state = blocker == 0 ? NULL :
				TextDatumGetCString(SPI_getbinval(tup, SPI_tuptable->tupdesc, 10, &isnull));
			int64		blocker_due = blocker == 0 ? 0 :
				jf_ts_to_due_ms(DatumGetTimestampTz(SPI_getbinval(tup, SPI_tuptable->tupdesc,
																  11, &isnull)));

			/*
			 * A dead letter that blocks, or a retry not due for a while:
			 * the key waits for it (its redrive, or its retry, is loaded
			 * and goes first), and the housekeeping checks it is still in
			 * the way (check_waited_heads), rather than the claim being
			 * tried again every second for as long as it stays.
			 */
			if (state != NULL && strcmp(state, "failed") == 0)
				jf_fair_key_await(ws->fair, lane, blocker,
								  jf_rate_clock_us() + DEAD_LETTER_WAIT_US);
			else if (state != NULL && strcmp(state, "pending") == 0 &&
					 blocker_due > now_ms + 2 * (int64) jobflow_reconcile_ms)
				jf_fair_key_await(ws->fair, lane, blocker,
								  jf_rate_clock_us() +
								  (blocker_due - now_ms + 2 * (int64) jobflow_reconcile_ms) * 1000);
			else
				(void) jf_fair_key_blocked(ws->fair, lane, jf_rate_clock_us(), blocker,
										   state != NULL && strcmp(state, "pending") == 0 ?
										   Max(blocker_due - now_ms, 0) * 1000 : 0);
			if (!jf_fair_push_front(ws->fair, lane, (uint64) id, due))
			{
				taskmap_delete_item(ws->map, e);
				ereport(ERROR,
						(errcode(ERRCODE_OUT_OF_MEMORY),
						 errmsg("out of memory parking due jobflow tasks")));
			}
			jf_fair_hold(ws->fair, lane);
			e->handle = 0;
			e->queue = lane;
			e->parked = true;
			continue;
		}
		jf_feed_upsert(ws, id, Max(due, now_ms + later), lane);
	}
}

uint64
jf_feed_map_memory(JfWorkerState *ws)
{
	return (uint64) ws->map->size * sizeof(TaskMapEntry);
}

/*
 * Run a query returning LOAD_COLUMNS through a cursor and put each row in
 * the wheel (load_tuple).
 */
static void
load_rows(JfWorkerState *ws, const char *sql, int nargs, Oid *types,
		  Datum *values)
{
	Portal		portal;
	int64		now_ms = jf_now_ms();

	portal = SPI_cursor_open_with_args(NULL, sql, nargs, types, values,
									   NULL, true, CURSOR_OPT_NO_SCROLL);
	for (;;)
	{
		uint64		i;

		SPI_cursor_fetch(portal, true, LOAD_FETCH);
		if (SPI_processed == 0)
			break;
		for (i = 0; i < SPI_processed; i++)
			load_tuple(ws, SPI_tuptable->vals[i], SPI_tuptable->tupdesc, now_ms);
		SPI_freetuptable(SPI_tuptable);
	}
	SPI_cursor_close(portal);
}

/*
 * At start no attempt is in flight, so a running task is one a previous
 * worker claimed and never finished (crash, kill -9, failover): it goes
 * back to pending with its attempt counted and logged as interrupted.  An
 * interrupted attempt is not a failure, so even a last attempt gets one
 * more; a task interrupted beyond that (one that kills every worker that
 * sends it) fails.  At least once: it may have been delivered.
 *
 * With ids, only those tasks: attempts whose outcome the log writer could
 * not record, or that an error left without a request (see
 * jf_dispatch_rescue_strays), so that they do not stay running until the next
 * start; why is logged with each.
 *
 * A tenant's transaction can hold a running task locked (an UPDATE that
 * met the row while it was pending locks the new version to recheck it)
 * for as long as it likes; waiting for it would stop the worker from
 * serving anyone, at start for as long as the lock stays (each try ends
 * in lock_timeout and starts over).  Locked tasks are skipped and left to
 * the strays sweep, STRAYS_RETRY_MS later, which finds them running with
 * no request and rescues them once the lock is gone.
 */
void
jf_feed_rescue_running(JfWorkerState *ws, int64 *ids, int n, const char *why)
{
	Oid			types[4] = {INT8ARRAYOID, TEXTOID, INT4OID, INT4OID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	int			ret;
	int			i;
	bool		isnull;
	int64		rescued;
	int64		skipped;

	if (ids != NULL)
	{
		Datum	   *d;

		jf_xact_begin("jobflow: rescue tasks whose outcome was lost");
		d = palloc(sizeof(Datum) * Max(n, 1));
		for (i = 0; i < n; i++)
			d[i] = Int64GetDatum(ids[i]);
		values[0] = PointerGetDatum(construct_array(d, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		values[1] = CStringGetTextDatum(why);
	}
	else
	{
		jf_xact_begin("jobflow: rescue running tasks");
		nulls[0] = 'n';
		values[0] = (Datum) 0;
		values[1] = CStringGetTextDatum("the worker stopped during this attempt; it may have been delivered");
	}
	/* with several workers, only its own ids: the others' are theirs */
	values[2] = Int32GetDatum(jobflow_workers_per_database);
	values[3] = Int32GetDatum(jf_worker_part);
	ret = SPI_execute_with_args(
		"WITH a AS MATERIALIZED ("
		"  SELECT t.id FROM jobflow.tasks t"
		"   WHERE t.state = 'running' AND ($1 IS NULL OR t.id = ANY($1))"
		"     AND " JF_OWNS_SQL("$3", "$4") "),"
		" k AS MATERIALIZED ("
		"  SELECT t.id FROM jobflow.tasks t"
		"   WHERE t.id IN (SELECT a.id FROM a) AND t.state = 'running'"
		"     FOR NO KEY UPDATE SKIP LOCKED),"
		" r AS ("
		"  UPDATE jobflow.tasks t"
		"     SET state = CASE WHEN t.attempts > t.max_attempts"
		"                      THEN 'failed' ELSE 'pending' END::jobflow.task_state,"
		"         last_error = $2,"
		"         updated_at = pg_catalog.now()"
		"    FROM k WHERE t.id = k.id"
		"  RETURNING t.id, t.attempts, t.owner, t.run_at),"
		" l AS ("
		"  INSERT INTO jobflow.task_log"
		"   (task_id, attempt, owner, scheduled_at, finished_at, outcome, error)"
		"  SELECT r.id, r.attempts, r.owner, r.run_at, pg_catalog.now(), 'interrupted', $2"
		"    FROM r"
		"  RETURNING 1)"
		" SELECT (SELECT pg_catalog.count(*) FROM l),"
		"        (SELECT pg_catalog.count(*) FROM a) - (SELECT pg_catalog.count(*) FROM k)",
		4, types, values, nulls, false, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "rescue of running tasks failed: %s", SPI_result_code_string(ret));
	rescued = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	skipped = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (rescued > 0)
		ereport(LOG,
				(errmsg("jobflow worker put back %lld running task(s): %s",
						(long long) rescued, TextDatumGetCString(values[1]))));
	if (skipped > 0)
	{
		ereport(LOG,
				(errmsg("jobflow worker left %lld running task(s) locked by another transaction to a later rescue",
						(long long) skipped)));
		ws->strays_look_ms = jf_now_ms() + STRAYS_RETRY_MS;
	}
	jf_xact_count_statements(1);
	jf_xact_commit();
}

/*
 * Turn the cron occurrences due before until_ms into tasks and put them in
 * the wheel (the worker's own inserts send no NOTIFY).  Occurrences are
 * materialised a minute or so ahead rather than over the whole horizon:
 * enough to be in the wheel well before they are due, few enough that
 * replacing or pausing a per-second timer cancels little.  Runs inside
 * the caller's transaction.
 */
static void
materialize_cron(JfWorkerState *ws, int64 now_ms, int64 until_ms, bool catch_up)
{
	Oid			types[2] = {TIMESTAMPTZOID, BOOLOID};
	Oid			id_types[1] = {INT8ARRAYOID};
	Datum		values[2];
	Datum		ids;
	bool		isnull;
	int64		lookahead = Max((int64) 60000, 3 * (int64) jobflow_reconcile_ms);
	uint64		i;
	int			ret;

	/* never while a restore may still load these ids (launcher/restore.c) */
	if (!jf_guard_may_materialise(&ws->sequences_behind))
		return;
	/* the first of the database's workers runs the timers for all */
	if (jf_worker_part != 0)
		return;
	values[0] = TimestampTzGetDatum(jf_ms_to_ts(Min(until_ms, now_ms + lookahead)));
	values[1] = BoolGetDatum(catch_up);
	ret = SPI_execute_with_args("SELECT pg_catalog.array_agg(m.id)"
								"  FROM jobflow._materialize_cron($1, $2) m",
								2, types, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "materialising cron timers failed: %s", SPI_result_code_string(ret));
	jf_xact_count_statements(1);
	ids = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return;

	/*
	 * The new rows are read by a statement of their own: within the one
	 * that inserted them, a scan of jobflow.tasks would not see them.
	 */
	ret = SPI_execute_with_args("SELECT " LOAD_COLUMNS " FROM jobflow.tasks t"
								" WHERE t.id = ANY($1)",
								1, id_types, &ids, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "loading materialised cron occurrences failed: %s",
			 SPI_result_code_string(ret));
	jf_metrics_count(JF_COUNT_CRON, SPI_processed);
	for (i = 0; i < SPI_processed; i++)
		load_tuple(ws, SPI_tuptable->vals[i], SPI_tuptable->tupdesc, now_ms);
	SPI_freetuptable(SPI_tuptable);
	jf_xact_count_statements(1);
}

/*
 * materialize_cron for the timers named only (jf_cron_only), whatever
 * happens: an error must not leave the next calls restricted.
 */
static void
materialize_timers(JfWorkerState *ws, const int64 *ids, int n)
{
	jf_cron_only(ids, n);
	PG_TRY();
	{
		materialize_cron(ws, jf_now_ms(), ws->loaded_until_ms, false);
	}
	PG_FINALLY();
	{
		jf_cron_only(NULL, 0);
	}
	PG_END_TRY();
}

/* qsort_arg order of indexes into arg, an array of range starts */
static int
compare_range(const void *a, const void *b, void *arg)
{
	const int64 *lo = arg;
	int64		x = lo[*(const int *) a];
	int64		y = lo[*(const int *) b];

	return (x > y) - (x < y);
}

/*
 * Sort and merge the ranges that arrived this turn (from index first on),
 * so overlapping ones cost one scan.  Those waiting from earlier turns keep
 * their place ahead of them: a range announced again (by a tenant that
 * keeps updating its tasks, say) goes to the back, and cannot keep others'
 * ranges from their turn.
 */
static void
merge_ranges(JfIdRanges *r, int first)
{
	int		   *order;
	int64	   *lo;
	int64	   *hi;
	int			n = 0;
	int			i;

	int			count = r->n - first;

	if (count <= 1)
		return;
	order = palloc(sizeof(int) * count);
	lo = palloc(sizeof(int64) * count);
	hi = palloc(sizeof(int64) * count);
	for (i = 0; i < count; i++)
		order[i] = first + i;
	qsort_arg(order, count, sizeof(int), compare_range, r->lo);
	for (i = 0; i < count; i++)
	{
		int64		l = r->lo[order[i]];
		int64		h = r->hi[order[i]];

		if (n > 0 && l <= hi[n - 1] + 1)
		{
			if (h > hi[n - 1])
				hi[n - 1] = h;
			continue;
		}
		lo[n] = l;
		hi[n] = h;
		n++;
	}
	memcpy(r->lo + first, lo, sizeof(int64) * n);
	memcpy(r->hi + first, hi, sizeof(int64) * n);
	r->n = first + n;
	pfree(order);
	pfree(lo);
	pfree(hi);
}

/*
 * Drain the notification queue: a wake-up, nothing more.  Called outside
 * any transaction after each wake-up.
 */
void
jf_feed_process_notifications(JfWorkerState *ws)
{
	const PQcommMethods *saved_methods = PqCommMethods;
	CommandDest saved_dest = whereToSendOutput;

	PqCommMethods = &capture_methods;
	whereToSendOutput = DestRemote;
	PG_TRY();
	{
		ProcessNotifyInterrupt(false);
	}
	PG_FINALLY();
	{
		PqCommMethods = saved_methods;
		whereToSendOutput = saved_dest;
	}
	PG_END_TRY();
}

/*
 * Load the next LOAD_CHUNK ids of the waiting ranges, in one short
 * transaction: a statement that inserted 200,000 tasks is loaded a chunk a
 * turn, so requests and other tasks go on meanwhile.
 */
static void
load_chunk(JfWorkerState *ws)
{
	Oid			types[5] = {INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID, INT4OID, INT4OID};
	Datum		values[5];
	JfIdRanges *a = &ws->announced;
	Datum	   *lo = palloc(sizeof(Datum) * a->n);
	Datum	   *hi = palloc(sizeof(Datum) * a->n);
	uint64		room = LOAD_CHUNK;
	int			n = 0;
	int			i;

	while (n < a->n && room > 0)
	{
		uint64		width = (uint64) a->hi[n] - (uint64) a->lo[n] + 1;

		lo[n] = Int64GetDatum(a->lo[n]);
		if (width > room)
		{
			/* split: the rest of this range waits for the next turn */
			hi[n] = Int64GetDatum(a->lo[n] + (int64) room - 1);
			a->lo[n] += (int64) room;
			n++;
			break;
		}
		hi[n] = Int64GetDatum(a->hi[n]);
		room -= width;
		n++;
	}
	jf_xact_begin("jobflow: load announced tasks");
	jf_xact_by_id_only();
	jf_fault("load");
	values[0] = PointerGetDatum(construct_array(lo, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = PointerGetDatum(construct_array(hi, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[2] = TimestampTzGetDatum(jf_ms_to_ts(ws->loaded_until_ms));
	values[3] = Int32GetDatum(jobflow_workers_per_database);
	values[4] = Int32GetDatum(jf_worker_part);
	load_rows(ws,
			  "SELECT " LOAD_COLUMNS
			  "  FROM ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::bigint[])) AS r(lo, hi)"
			  "  JOIN jobflow.tasks t ON t.id BETWEEN r.lo AND r.hi"
			  " WHERE " JF_PENDING_SQL("t") " AND t.run_at < $3"
			  "   AND " JF_OWNS_SQL("$4", "$5"),
			  5, types, values);
	jf_xact_commit();

	/* drop the ranges loaded whole (a split one stays, shortened) */
	if (n > 0 && DatumGetInt64(hi[n - 1]) == a->hi[n - 1])
		i = n;
	else
		i = n - 1;
	memmove(a->lo, a->lo + i, sizeof(int64) * (a->n - i));
	memmove(a->hi, a->hi + i, sizeof(int64) * (a->n - i));
	a->n -= i;
	pfree(lo);
	pfree(hi);
}

/*
 * Take what committed transactions published for this database, and load
 * a chunk of the tasks it names.  Nothing published and nothing waiting:
 * no statement.  Called outside any transaction, every turn; true while
 * ranges wait for a later turn.
 */
bool
jf_feed_take_wakeups(JfWorkerState *ws)
{
	JfIdRanges *a = &ws->announced;
	int			i;
	int			before = a->n;
	bool		cron_changed;
	bool		overflowed = false;
	int64	   *timers = palloc(sizeof(int64) * JF_WAKE_TIMERS);
	int			ntimers = 0;

	SpinLockAcquire(&jf_my_slot->wake_mutex);
	for (i = 0; i < jf_my_slot->nwake; i++)
	{
		JfWakeRange *r = &jf_my_slot->wake[i];

		if (r->dboid != MyDatabaseId)
			continue;
		/* one statement that spans a huge id range: a rescan is cheaper */
		if ((uint64) r->hi - (uint64) r->lo >= (uint64) MAX_RANGE_WIDTH ||
			a->n >= MAX_PENDING_RANGES)
			overflowed = true;
		else
		{
			a->lo[a->n] = r->lo;
			a->hi[a->n] = r->hi;
			a->n++;
		}
	}
	jf_my_slot->nwake = 0;
	overflowed |= jf_my_slot->wake_overflowed;
	jf_my_slot->wake_overflowed = false;
	cron_changed = jf_my_slot->wake_cron;
	jf_my_slot->wake_cron = false;
	for (i = 0; i < jf_my_slot->ntimer_wakes; i++)
		if (jf_my_slot->timer_wakes[i].dboid == MyDatabaseId)
			timers[ntimers++] = jf_my_slot->timer_wakes[i].id;
	jf_my_slot->ntimer_wakes = 0;
	SpinLockRelease(&jf_my_slot->wake_mutex);

	/* tasks due within the notify window: the rolling rescan covers them */
	if (overflowed)
		ws->rescan_soon = true;
	if (ws->loaded_until_ms == PG_INT64_MIN)
	{
		a->n = 0;
		return false;
	}
	/*
	 * Timers whose rows changed: those named, by primary key; all of them
	 * only when more changed than shared memory holds (or a prepared
	 * transaction, or a schema before 0.3.0, did not say which).
	 */
	if ((cron_changed || ntimers > 0) && jf_worker_part == 0)
	{
		jf_xact_begin("jobflow: materialise changed cron timers");
		if (cron_changed)
			materialize_cron(ws, jf_now_ms(), ws->loaded_until_ms, false);
		else
			materialize_timers(ws, timers, ntimers);
		jf_xact_commit();
	}
	if (a->n > before)
		merge_ranges(a, before);
	if (a->n > 0)
		load_chunk(ws);
	return a->n > 0;
}

/*
 * The tasks ordered keys wait for (core/fair.h): a retry, however far off
 * it is due, or a dead letter that blocks, until redriven.  Its owner may
 * cancel it, reschedule it after the key's next task, or delete it (or
 * retention prunes the dead letter, or the queue's dead_letter becomes
 * skip), and no wake-up says so: those no longer pending (or failed and
 * blocking), or no longer the earliest unfinished task of their ordered
 * key, free their key now.  One statement an interval, only while some
 * key waits, 1,000 tasks at most (the next ones at the next interval).
 * Inside a transaction.
 */
static void
check_waited_heads(JfWorkerState *ws)
{
	uint64_t   *heads = palloc(sizeof(uint64_t) * WAITED_HEADS_MAX);
	int			n = jf_fair_waited_heads(ws->fair, heads, WAITED_HEADS_MAX);
	Datum	   *ids;
	Oid			types[1] = {INT8ARRAYOID};
	Datum		values[1];
	int64	   *kept;
	uint64		nkept;
	uint64		i;
	int			j;

	if (n == 0)
	{
		pfree(heads);
		return;
	}
	ids = palloc(sizeof(Datum) * n);
	for (j = 0; j < n; j++)
		ids[j] = Int64GetDatum((int64) heads[j]);
	values[0] = PointerGetDatum(construct_array(ids, n, INT8OID, 8, FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	if (SPI_execute_with_args("SELECT h.id FROM jobflow.tasks h"
							  " WHERE h.id = ANY ($1) AND h.flow_key IS NOT NULL"
							  "   AND EXISTS (SELECT 1 FROM jobflow.queues o"
							  "                WHERE o.owner = h.owner AND o.name = h.queue"
							  "                  AND o.ordered"
							  "                  AND (" JF_PENDING_SQL("h")
							  "                       OR (h.state::pg_catalog.text = 'failed'"
							  "                           AND o.dead_letter = 'block')))"
							  "   AND " JF_FLOW_FIRST_EARLIER_SQL("p", "h", "o") " IS NULL",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not check the tasks ordered keys wait for");
	jf_xact_count_statements(1);
	nkept = SPI_processed;
	kept = palloc(sizeof(int64) * Max(nkept, 1));
	for (i = 0; i < nkept; i++)
	{
		bool		isnull;

		kept[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
											  1, &isnull));
	}
	qsort(kept, nkept, sizeof(int64), jf_compare_int64);
	for (j = 0; j < n; j++)
	{
		int64		id = (int64) heads[j];

		if (bsearch(&id, kept, nkept, sizeof(int64), jf_compare_int64) == NULL)
			jf_fair_head_gone(ws->fair, heads[j]);
	}
	pfree(kept);
	pfree(ids);
	pfree(heads);
}

/*
 * Extend the horizon and rescan the next two intervals.  Transactions only
 * NOTIFY for tasks due within three intervals (notify_before_ms); a task
 * due later is loaded by the rescan that runs between two intervals and
 * one interval before it is due.  The rescan also catches what a lost or
 * overflowing notification missed.  Both bounds are published before the
 * scan, so a transaction committing after the scan's snapshot compares
 * against them.
 */
void
jf_feed_housekeeping(JfWorkerState *ws, int64 now_ms)
{
	int64		new_until = now_ms + (int64) jobflow_horizon_s * 1000;
	int64		recheck_until = now_ms + 2 * (int64) jobflow_reconcile_ms;
	Oid			types[6] = {TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	INT4OID, INT4OID};
	Datum		values[6];
	bool		rescued = false;

	if (new_until < ws->loaded_until_ms)
		new_until = ws->loaded_until_ms;	/* jobflow.horizon was lowered */
	/*
	 * Lanes, origins and named queues no task needs: a quarter at a time,
	 * and never more than a few milliseconds' work.
	 */
	if (ws->fair != NULL)
		(void) jf_fair_collect(ws->fair, jf_rate_clock_us(), JF_FAIR_COLLECT_LOOK,
							   JF_FAIR_COLLECT_FREE);
	pg_atomic_write_u64(&jf_my_slot->horizon_end_ms, (uint64) new_until);
	pg_atomic_write_u64(&jf_my_slot->notify_before_ms,
						(uint64) Min(new_until, now_ms + 3 * (int64) jobflow_reconcile_ms));

	{
		int64	   *orphans;
		int			norphans = jf_log_writer_orphans(ws->log, &orphans);

		/* forgotten only once rescued: an error keeps them for next time */
		if (norphans > 0)
		{
			jf_feed_rescue_running(ws, orphans, norphans,
								"the worker could not record the outcome of this attempt");
			jf_log_writer_forget_orphans(ws->log, norphans);
			rescued = true;
		}
	}

	jf_xact_begin("jobflow: load tasks within the horizon");
	jf_fault("housekeeping");
	jf_metrics_count(JF_COUNT_RESCANS, 1);
	materialize_cron(ws, now_ms, new_until, ws->loaded_until_ms == PG_INT64_MIN);
	values[0] = TimestampTzGetDatum(jf_ms_to_ts(new_until));
	if (ws->loaded_until_ms == PG_INT64_MIN)
	{
		/* everything: at start in due order, the wheel's cheapest case */
		types[1] = types[2] = INT4OID;
		values[1] = Int32GetDatum(jobflow_workers_per_database);
		values[2] = Int32GetDatum(jf_worker_part);
		load_rows(ws,
				  "SELECT " LOAD_COLUMNS " FROM jobflow.tasks t"
				  " WHERE t.state = 'pending' AND t.run_at < $1"
				  "   AND " JF_OWNS_SQL("$2", "$3") " ORDER BY t.run_at",
				  3, types, values);
	}
	else
	{
		/*
		 * Overdue tasks the wheel does not hold come from errors and rescues
		 * (which ask for a full rescan) or from prepared transactions
		 * committed late (caught by the periodic full one); a dropped
		 * wake-up only concerns tasks due within the notify window, which
		 * the bounded rescan covers (so no role can make the worker rescan
		 * everything by announcing ranges too wide to load):
		 * otherwise the rescan need not re-read an overdue backlog that
		 * sits parked in memory, an interval after interval.
		 */
		bool		full = ws->full_rescan_soon || rescued || now_ms >= ws->next_full_rescan_ms;

		values[1] = TimestampTzGetDatum(jf_ms_to_ts(ws->loaded_until_ms));
		values[2] = TimestampTzGetDatum(jf_ms_to_ts(recheck_until));
		values[3] = full ? TimestampTzGetDatum(DT_NOBEGIN) :
			TimestampTzGetDatum(jf_ms_to_ts(now_ms - 2 * (int64) jobflow_reconcile_ms));
		if (full)
		{
			ws->next_full_rescan_ms = now_ms + FULL_RESCAN_EVERY * (int64) jobflow_reconcile_ms;
			ws->full_rescan_soon = false;
		}
		values[4] = Int32GetDatum(jobflow_workers_per_database);
		values[5] = Int32GetDatum(jf_worker_part);
		load_rows(ws,
				  "SELECT " LOAD_COLUMNS " FROM jobflow.tasks t"
				  " WHERE t.state = 'pending' AND t.run_at < $1"
				  "   AND (t.run_at >= $2 OR (t.run_at < $3 AND t.run_at >= $4))"
				  "   AND " JF_OWNS_SQL("$5", "$6"),
				  6, types, values);
	}
	if (ws->fair != NULL)
		check_waited_heads(ws);
	jf_xact_commit();

	ws->loaded_until_ms = new_until;
	ws->last_housekeeping_ms = now_ms;
	ws->next_housekeeping_ms = now_ms + jobflow_reconcile_ms;
	ws->rescan_soon = false;
}
