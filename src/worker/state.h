/*-------------------------------------------------------------------------
 *
 * state.h
 *	  State shared by the modules of jobflow's background worker: the
 *	  wheel feeder (feed.c), the dispatcher glue (dispatch.c), the log
 *	  writer (log_writer.c), the pruner (prune.c), the queues' view
 *	  (queues.c) and the loop that drives them (worker.c), which holds it.
 *
 * All of it lives in the worker process only.  Times are Unix
 * milliseconds (int64) unless a name says otherwise.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_WORKER_STATE_H
#define JOBFLOW_WORKER_STATE_H

#include "base/settings.h"
#include "launcher/slots.h"

#include "datatype/timestamp.h"
#include "portability/instr_time.h"
#include "utils/timestamp.h"

#include "core/fair.h"
#include "http/http.h"
#include "core/wheel.h"

/*
 * Whether a task is this worker's: with several workers per database,
 * the first serves the tasks of cron timers (so that catching up on missed
 * occurrences stays in one place), and each serves the other tasks whose
 * route (JF_ROUTE_SQL: the id, or for a task with a flow key the hash of
 * the key, so that all tasks of a key are one worker's and its limits and
 * order hold exactly) is equal to its part modulo their number, so no task
 * is ever claimed by two and every task has one.
 */
static inline bool
jf_worker_owns(int64 route, bool cron)
{
	int64		n = jobflow_workers_per_database;

	if (n <= 1)
		return true;
	if (cron)
		return jf_worker_part == 0;
	return ((route % n) + n) % n == jf_worker_part;
}

/* A task's route over jobflow.tasks t (see jf_worker_owns). */
#define JF_ROUTE_SQL \
	"CASE WHEN t.flow_key IS NULL THEN t.id" \
	" ELSE pg_catalog.hashtext(t.flow_key)::pg_catalog.int8 END"

/* The same, in SQL over jobflow.tasks t, with $N and $part as parameters. */
#define JF_OWNS_SQL(n, part) \
	"(" n " = 1 OR CASE WHEN t.cron_id IS NOT NULL THEN " part " = 0" \
	" ELSE ((" JF_ROUTE_SQL ") % " n " + " n ") % " n " = " part " END)"

/*
 * An earlier task of the same flow key as task d, of its ordered queue o,
 * that keeps d waiting: p over jobflow.tasks.  Unfinished (pending, retries
 * included, or running), or failed while the queue's dead letters block
 * their key.  "Earlier" is by flow_at (the run_at it was scheduled for,
 * which a retry does not move), then by id.  The partial index of keyed
 * tasks on (owner, queue, flow_key, flow_at, id) finds them: its predicate
 * is repeated so that the planner may use it.  The claim (dispatch.c)
 * leaves such a task; the recheck of what it left (feed.c) names the
 * earliest one.
 */
#define JF_FLOW_EARLIER_SQL(p, d, o) \
	p ".owner = " d ".owner AND " p ".queue = " d ".queue" \
	" AND " p ".flow_key = " d ".flow_key AND " p ".flow_key IS NOT NULL" \
	" AND " p ".state IN ('pending', 'running', 'failed')" \
	" AND (" p ".state <> 'failed' OR " o ".dead_letter = 'block')" \
	" AND (" p ".flow_at, " p ".id) < (" d ".flow_at, " d ".id)"

/*
 * The id of the earliest task that keeps task d waiting (as above; NULL:
 * none), of d's queue if it is ordered.  The comparison of rows bounds
 * the scan of the partial index within d's key, and ORDER BY ... LIMIT 1
 * makes that scan the plan's only sensible choice: as a NOT EXISTS, a
 * generic plan made while one key held most tasks read the whole table
 * for each task, and an OR of the two comparisons read the key's whole
 * backlog for the task first of its key.
 */
#define JF_FLOW_FIRST_EARLIER_SQL(p, d, o) \
	"(SELECT " p ".id FROM jobflow.queues " o ", jobflow.tasks " p \
	" WHERE " o ".owner = " d ".owner AND " o ".name = " d ".queue AND " o ".ordered" \
	"   AND " JF_FLOW_EARLIER_SQL(p, d, o) \
	" ORDER BY " p ".flow_at, " p ".id LIMIT 1)"

/*
 * A worker's share of a cap that holds for the database: rounded up, so
 * that no worker gets none (a queue capped at 1 by 2 workers may have 2 in
 * flight; rates, divided exactly, hold).
 */
static inline int
jf_worker_share_cap(int cap)
{
	return (cap + jobflow_workers_per_database - 1) / jobflow_workers_per_database;
}

/* Microseconds between the Unix epoch and PostgreSQL's (2000-01-01). */
#define JF_EPOCH_DIFF_US \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

/* The wheel accepts a day and a bit; jobflow.horizon loads up to a day. */
#define JF_WHEEL_HORIZON_MS ((int64) 86400 * 1000 + 60 * 1000)

/*
 * "alias is pending", for the worker's statements that fetch tasks by id:
 * compared as text, so that no plan can go through the partial index on
 * pending tasks' run_at, which statistics taken while few tasks were
 * pending make look tiny, and which would then be read whole for each
 * statement (every due task, at every claim of a backlog).
 */
#define JF_PENDING_SQL(alias) alias ".state::pg_catalog.text = 'pending'"

/*
 * Rounding up: a task due at 12:00:00.000400 must not fire at 12:00:00.000,
 * so its tick is 12:00:00.001.
 */
static inline int64
jf_ts_to_due_ms(TimestampTz ts)
{
	int64		us = ts + JF_EPOCH_DIFF_US;

	return us >= 0 ? (us + 999) / 1000 : -((-us) / 1000);
}

static inline TimestampTz
jf_ms_to_ts(int64 ms)
{
	return ms * 1000 - JF_EPOCH_DIFF_US;
}

/* qsort/bsearch order of int64 ids */
static inline int
jf_compare_int64(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

static inline int64
jf_now_ms(void)
{
	return (GetCurrentTimestamp() + JF_EPOCH_DIFF_US) / 1000;
}

/*
 * The clock of dispatch rates (jf_fair_pick, jf_fair_collect): monotonic,
 * in microseconds.  Rates measured on the wall clock froze for as long as
 * the clock was stepped back, and sent a burst when it was stepped ahead.
 */
static inline int64
jf_rate_clock_us(void)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	return (int64) INSTR_TIME_GET_MICROSEC(now);
}

struct taskmap_hash;

/* id ranges announced at commit and not loaded yet, kept across turns */
typedef struct JfIdRanges
{
	int64	   *lo;
	int64	   *hi;
	int			n;
} JfIdRanges;

/* the worker's view of jobflow.queues: what it last read (queues.c) */
typedef struct JfQueuesView
{
	uint64		seen_version;
	uint32		seen_generation;
	bool		loaded;
	bool		any_retention;	/* some queue has a retention of its own */
	bool		any_positive_retention; /* ... one that prunes */
} JfQueuesView;

struct JfPrune;

typedef struct JfWorkerState
{
	MemoryContext cxt;			/* long-lived allocations */
	MemoryContext turn_cxt;		/* what one turn allocates outside transactions */
	JfWheel    *wheel;
	struct taskmap_hash *map;	/* task id -> wheel handle */
	JfHttp	   *http;
	JfFair	   *fair;			/* due tasks parked per (owner, origin) */
	struct JfCircuits *circuits;	/* per (owner, origin): core/circuit.h */
	bool		circuits_changed;	/* a state changed since last published */
	struct JfLogWriter *log;	/* outcomes waiting to be written */
	struct JfDispatch *dispatch;	/* requests claimed and in flight */
	struct JfPrune *prune;		/* when the next batch of pruning goes */
	JfQueuesView queues;
	int64		loaded_until_ms;	/* pending tasks due before are in the wheel */
	JfIdRanges	announced;		/* ... and these ids too, once loaded (feed.c) */
	int64		next_housekeeping_ms;
	int64		last_housekeeping_ms;
	int64		next_full_rescan_ms;	/* overdue tasks of any age rescanned */
	int64		strays_look_ms;	/* look for stray running tasks from then on
								 * (an ERROR may have left some); INT64_MAX:
								 * none suspected */
	bool		rescan_soon;	/* notifications were dropped: rescan early */
	bool		full_rescan_soon;	/* an error: overdue tasks of any age too */
	bool		stopping;		/* SIGTERM: claim nothing new */
	bool		sequences_behind;	/* last seen by materialize_cron */
} JfWorkerState;

#endif							/* JOBFLOW_WORKER_STATE_H */
