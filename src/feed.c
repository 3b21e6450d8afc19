/*-------------------------------------------------------------------------
 *
 * feed.c
 *	  Keeps the worker's time wheel in step with jobflow.tasks.
 *
 * The table is the truth; the wheel is a cache of the pending tasks due
 * before loaded_until_ms.  Three paths fill it:
 *
 *	- at start, every pending task due within the horizon, in due order;
 *	- NOTIFY jobflow, sent at commit by the statement trigger of
 *	  jobflow--0.1.0.sql with the range of ids the statement touched, for
 *	  tasks due within three reconcile intervals: the worker reads each
 *	  payload and loads those rows by primary key;
 *	- housekeeping every jobflow.reconcile_interval: extends the horizon,
 *	  and rescans the next two intervals, which loads the tasks that did
 *	  not notify at least an interval before they are due, and whatever a
 *	  lost notification or a queue overflow missed.
 *
 * Background workers cannot use LISTEN's normal delivery, so the worker
 * calls Async_Listen itself and, between transactions, drains the queue
 * with ProcessNotifyInterrupt while PqCommMethods points at a capture
 * function: each 'A' message the backend would send a client lands here.
 * Draining after every wake keeps the cluster-wide notification queue
 * from filling, whatever the rate of notifications.
 *
 * A task id maps to at most one wheel entry (the taskmap), so loading a
 * task twice, or rescheduling it, replaces its entry.  A stale entry can
 * only make the claim statement find nothing: it never fires a task early.
 *
 *-------------------------------------------------------------------------
 */
#include "worker.h"

#include "guard.h"

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

/* task id -> wheel handle: 16 bytes an entry */
typedef struct TaskMapEntry
{
	int64		id;
	uint32		handle;
	char		status;
} TaskMapEntry;

static inline uint32
hash_task_id(int64 id)
{
	uint64		h = (uint64) id;

	h ^= h >> 33;
	h *= UINT64CONST(0xff51afd7ed558ccd);
	h ^= h >> 33;
	return (uint32) h;
}

#define SH_PREFIX taskmap
#define SH_ELEMENT_TYPE TaskMapEntry
#define SH_KEY_TYPE int64
#define SH_KEY id
#define SH_HASH_KEY(tb, key) hash_task_id(key)
#define SH_EQUAL(tb, a, b) ((a) == (b))
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

/* most id ranges buffered from one drain before falling back to a rescan */
#define MAX_PENDING_RANGES 8192
/* widest id range loaded by primary key; wider ones wait for a rescan */
#define MAX_RANGE_WIDTH 10000
/* most ids loaded by primary key per drain, all ranges merged */
#define MAX_DRAIN_WIDTH 100000
/* rows fetched per cursor round trip when loading */
#define LOAD_FETCH 10000

static int64 *range_lo;
static int64 *range_hi;
static int	nranges;
static bool ranges_overflowed;
static bool cron_changed;		/* NOTIFY jobflow 'cron': a timer changed */

static void load_rows(WorkerState *ws, const char *sql, int nargs, Oid *types,
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
 * Receives what the backend would send a client.  Only NotificationResponse
 * ('A': int32 pid, channel, payload) matters; the payload is "lo hi", the
 * id range of one statement.  Anything else (an empty payload from CREATE
 * EXTENSION, a malformed one) is just a wake-up.
 */
static int
capture_putmessage(char msgtype, const char *s, size_t len)
{
	const char *channel;
	const char *payload;
	const char *end = s + len;
	char	   *p;
	long long	lo,
				hi;

	if (msgtype != 'A' || len < 6)
		return 0;
	channel = s + 4;
	payload = memchr(channel, '\0', end - channel);
	if (payload == NULL || ++payload >= end || memchr(payload, '\0', end - payload) == NULL)
		return 0;
	if (strcmp(channel, JOBFLOW_CHANNEL) != 0)
		return 0;
	if (strcmp(payload, "cron") == 0)
	{
		cron_changed = true;
		return 0;
	}

	errno = 0;
	lo = strtoll(payload, &p, 10);
	if (errno != 0 || p == payload || *p != ' ')
		return 0;
	hi = strtoll(p + 1, &p, 10);
	if (errno != 0 || *p != '\0' || hi < lo)
		return 0;

	if (nranges > 0 && range_lo[nranges - 1] == lo && range_hi[nranges - 1] == hi)
		return 0;
	/* anyone may NOTIFY: a wide range is not worth its index scan */
	if (nranges >= MAX_PENDING_RANGES ||
		(uint64) hi - (uint64) lo >= (uint64) MAX_RANGE_WIDTH)
	{
		ranges_overflowed = true;
		return 0;
	}
	range_lo[nranges] = lo;
	range_hi[nranges] = hi;
	nranges++;
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
feed_init(WorkerState *ws)
{
	ws->wheel = jf_wheel_create(jf_now_ms(), JF_WHEEL_HORIZON_MS, 0);
	if (ws->wheel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory creating the jobflow time wheel")));
	ws->map = taskmap_create(ws->cxt, 1024, NULL);
	ws->loaded_until_ms = PG_INT64_MIN;
	range_lo = MemoryContextAlloc(ws->cxt, sizeof(int64) * MAX_PENDING_RANGES);
	range_hi = MemoryContextAlloc(ws->cxt, sizeof(int64) * MAX_PENDING_RANGES);
}

/* LISTEN before the first scan, so no commit falls between the two. */
void
feed_listen(void)
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
feed_upsert(WorkerState *ws, int64 id, int64 due_ms)
{
	bool		found;
	TaskMapEntry *e = taskmap_insert(ws->map, id, &found);
	uint32		handle;
	JfWheelStatus st;

	if (found)
		(void) jf_wheel_cancel(ws->wheel, e->handle, (uint64) id);
	st = jf_wheel_insert(ws->wheel, (uint64) id, due_ms, &handle);
	if (st == JF_WHEEL_OK)
	{
		e->handle = handle;
		return;
	}
	taskmap_delete_item(ws->map, e);
	if (st == JF_WHEEL_NO_MEMORY || st == JF_WHEEL_FULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("jobflow time wheel is out of memory")));
}

/* The task's entry fired: its handle is no longer ours. */
void
feed_forget(WorkerState *ws, int64 id)
{
	taskmap_delete(ws->map, id);
}

uint64
feed_map_memory(WorkerState *ws)
{
	return (uint64) ws->map->size * sizeof(TaskMapEntry);
}

/*
 * Run a query returning (id bigint, run_at timestamptz) through a cursor
 * and put each row in the wheel.  A task already in the wheel at its
 * run_at is left alone (rescans must not churn entries); one whose run_at
 * moved, announced or not, gets its entry moved.
 */
static void
load_rows(WorkerState *ws, const char *sql, int nargs, Oid *types,
		  Datum *values)
{
	Portal		portal;

	portal = SPI_cursor_open_with_args(NULL, sql, nargs, types, values,
									   NULL, true, CURSOR_OPT_NO_SCROLL);
	for (;;)
	{
		uint64		i;

		SPI_cursor_fetch(portal, true, LOAD_FETCH);
		if (SPI_processed == 0)
			break;
		for (i = 0; i < SPI_processed; i++)
		{
			HeapTuple	tup = SPI_tuptable->vals[i];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			bool		isnull;
			int64		id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
			TimestampTz run_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 2, &isnull));

			int64		due = jf_ts_to_due_ms(run_at);
			TaskMapEntry *e;

			if ((e = taskmap_lookup(ws->map, id)) != NULL &&
				jf_wheel_due(ws->wheel, e->handle, (uint64) id) == due)
				continue;
			feed_upsert(ws, id, due);
		}
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
 * not record, so that they do not stay running until the next start.
 */
void
feed_rescue_running(WorkerState *ws, int64 *ids, int n)
{
	Oid			types[2] = {INT8ARRAYOID, TEXTOID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	int			ret;
	int			i;

	if (ids != NULL)
	{
		Datum	   *d;

		jf_xact_begin("jobflow: rescue tasks whose outcome was lost");
		d = palloc(sizeof(Datum) * Max(n, 1));
		for (i = 0; i < n; i++)
			d[i] = Int64GetDatum(ids[i]);
		values[0] = PointerGetDatum(construct_array(d, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		values[1] = CStringGetTextDatum("the worker could not record the outcome of this attempt");
	}
	else
	{
		jf_xact_begin("jobflow: rescue running tasks");
		nulls[0] = 'n';
		values[0] = (Datum) 0;
		values[1] = CStringGetTextDatum("the worker stopped during this attempt; it may have been delivered");
	}
	ret = SPI_execute_with_args(
		"WITH r AS ("
		"  UPDATE jobflow.tasks t"
		"     SET state = CASE WHEN t.attempts > t.max_attempts"
		"                      THEN 'failed' ELSE 'pending' END::jobflow.task_state,"
		"         last_error = $2,"
		"         updated_at = pg_catalog.now()"
		"   WHERE t.state = 'running' AND ($1 IS NULL OR t.id = ANY($1))"
		"  RETURNING t.id, t.attempts, t.owner, t.run_at)"
		" INSERT INTO jobflow.task_log"
		"   (task_id, attempt, owner, scheduled_at, finished_at, outcome, error)"
		" SELECT r.id, r.attempts, r.owner, r.run_at, pg_catalog.now(), 'interrupted', $2"
		"   FROM r", 2, types, values, nulls, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "rescue of running tasks failed: %s", SPI_result_code_string(ret));
	if (SPI_processed > 0)
		ereport(LOG,
				(errmsg("jobflow worker put back %llu running task(s): %s",
						(unsigned long long) SPI_processed, TextDatumGetCString(values[1]))));
	worker_count_statement(1);
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
materialize_cron(WorkerState *ws, int64 now_ms, int64 until_ms, bool catch_up)
{
	Oid			types[2] = {TIMESTAMPTZOID, BOOLOID};
	Datum		values[2];
	int64		lookahead = Max((int64) 60000, 3 * (int64) jobflow_reconcile_ms);
	uint64		i;
	int			ret;

	/* never while a restore may still load these ids (guard.c) */
	if (!jf_guard_may_materialise(&ws->sequences_behind))
		return;
	values[0] = TimestampTzGetDatum(jf_ms_to_ts(Min(until_ms, now_ms + lookahead)));
	values[1] = BoolGetDatum(catch_up);
	ret = SPI_execute_with_args("SELECT id, run_at FROM jobflow._materialize_cron($1, $2)",
								2, types, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "materialising cron timers failed: %s", SPI_result_code_string(ret));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int64		id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
													 SPI_tuptable->tupdesc, 1, &isnull));
		TimestampTz run_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i],
															   SPI_tuptable->tupdesc, 2, &isnull));

		feed_upsert(ws, id, jf_ts_to_due_ms(run_at));
	}
	SPI_freetuptable(SPI_tuptable);
	worker_count_statement(1);
}

static int
compare_range(const void *a, const void *b)
{
	int64		x = range_lo[*(const int *) a];
	int64		y = range_lo[*(const int *) b];

	return (x > y) - (x < y);
}

/*
 * Sort and merge the drained ranges, so overlapping payloads cost one scan,
 * and cap the ids loaded per drain: anyone may NOTIFY, and what is over the
 * cap is due within the notify window, which the rescan covers anyway.
 */
static void
merge_ranges(void)
{
	int		   *order;
	int64	   *lo;
	int64	   *hi;
	int			n = 0;
	uint64		total = 0;
	int			i;

	if (nranges <= 1)
		return;
	order = palloc(sizeof(int) * nranges);
	lo = palloc(sizeof(int64) * nranges);
	hi = palloc(sizeof(int64) * nranges);
	for (i = 0; i < nranges; i++)
		order[i] = i;
	qsort(order, nranges, sizeof(int), compare_range);
	for (i = 0; i < nranges; i++)
	{
		int64		l = range_lo[order[i]];
		int64		h = range_hi[order[i]];

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
	nranges = 0;
	for (i = 0; i < n; i++)
	{
		uint64		width = (uint64) hi[i] - (uint64) lo[i] + 1;

		if (total + width > MAX_DRAIN_WIDTH)
		{
			ranges_overflowed = true;
			break;
		}
		total += width;
		range_lo[nranges] = lo[i];
		range_hi[nranges] = hi[i];
		nranges++;
	}
	pfree(order);
	pfree(lo);
	pfree(hi);
}

/*
 * Drain the notification queue and load the rows it names.  Called
 * outside any transaction after each wake-up.
 */
void
feed_process_notifications(WorkerState *ws)
{
	const PQcommMethods *saved_methods = PqCommMethods;
	CommandDest saved_dest = whereToSendOutput;

	nranges = 0;
	ranges_overflowed = false;
	cron_changed = false;
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

	if (cron_changed && ws->loaded_until_ms != PG_INT64_MIN)
	{
		jf_xact_begin("jobflow: materialise changed cron timers");
		materialize_cron(ws, jf_now_ms(), ws->loaded_until_ms, false);
		jf_xact_commit();
	}
	/*
	 * Notified tasks are due within the notify window, which the rolling
	 * rescan covers: ranges that were dropped only ask for it sooner.
	 */
	merge_ranges();
	if (ranges_overflowed)
		ws->rescan_soon = true;
	if (nranges == 0 || ws->loaded_until_ms == PG_INT64_MIN)
		return;

	{
		Oid			types[3] = {INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID};
		Datum		values[3];
		Datum	   *lo;
		Datum	   *hi;
		int			i;

		jf_xact_begin("jobflow: load notified tasks");
		lo = palloc(sizeof(Datum) * nranges);
		hi = palloc(sizeof(Datum) * nranges);
		for (i = 0; i < nranges; i++)
		{
			lo[i] = Int64GetDatum(range_lo[i]);
			hi[i] = Int64GetDatum(range_hi[i]);
		}
		values[0] = PointerGetDatum(construct_array(lo, nranges, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		values[1] = PointerGetDatum(construct_array(hi, nranges, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		values[2] = TimestampTzGetDatum(jf_ms_to_ts(ws->loaded_until_ms));
		load_rows(ws,
				  "SELECT t.id, t.run_at"
				  "  FROM ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::bigint[])) AS r(lo, hi)"
				  "  JOIN jobflow.tasks t ON t.id BETWEEN r.lo AND r.hi"
				  " WHERE t.state = 'pending' AND t.run_at < $3",
				  3, types, values);
		jf_xact_commit();
	}
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
feed_housekeeping(WorkerState *ws, int64 now_ms)
{
	int64		new_until = now_ms + (int64) jobflow_horizon_s * 1000;
	int64		recheck_until = now_ms + 2 * (int64) jobflow_reconcile_ms;
	Oid			types[3] = {TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[3];

	if (new_until < ws->loaded_until_ms)
		new_until = ws->loaded_until_ms;	/* jobflow.horizon was lowered */
	pg_atomic_write_u64(&jobflow_shared->horizon_end_ms, (uint64) new_until);
	pg_atomic_write_u64(&jobflow_shared->notify_before_ms,
						(uint64) Min(new_until, now_ms + 3 * (int64) jobflow_reconcile_ms));

	{
		int64	   *orphans;
		int			norphans = log_writer_orphans(&orphans);

		/* forgotten only once rescued: an error keeps them for next time */
		if (norphans > 0)
		{
			feed_rescue_running(ws, orphans, norphans);
			log_writer_forget_orphans(norphans);
		}
	}

	jf_xact_begin("jobflow: load tasks within the horizon");
	materialize_cron(ws, now_ms, new_until, ws->loaded_until_ms == PG_INT64_MIN);
	values[0] = TimestampTzGetDatum(jf_ms_to_ts(new_until));
	if (ws->loaded_until_ms == PG_INT64_MIN)
	{
		/* everything: at start in due order, the wheel's cheapest case */
		load_rows(ws,
				  "SELECT id, run_at FROM jobflow.tasks"
				  " WHERE state = 'pending' AND run_at < $1 ORDER BY run_at",
				  1, types, values);
	}
	else
	{
		values[1] = TimestampTzGetDatum(jf_ms_to_ts(ws->loaded_until_ms));
		values[2] = TimestampTzGetDatum(jf_ms_to_ts(recheck_until));
		load_rows(ws,
				  "SELECT id, run_at FROM jobflow.tasks"
				  " WHERE state = 'pending' AND run_at < $1"
				  "   AND (run_at >= $2 OR run_at < $3)",
				  3, types, values);
	}
	jf_xact_commit();

	ws->loaded_until_ms = new_until;
	ws->last_housekeeping_ms = now_ms;
	ws->next_housekeeping_ms = now_ms + jobflow_reconcile_ms;
	ws->rescan_soon = false;
}
