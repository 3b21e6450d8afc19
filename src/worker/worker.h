/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  State shared by the modules of jobflow's background worker: the
 *	  wheel feeder (feed.c), the dispatcher glue (dispatch.c), the log
 *	  writer (log_writer.c) and the loop that drives them (worker.c).
 *
 * All of it lives in the worker process only.  Times are Unix
 * milliseconds (int64) unless a name says otherwise.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_WORKER_H
#define JOBFLOW_WORKER_H

#include "jobflow.h"

#include "datatype/timestamp.h"
#include "portability/instr_time.h"
#include "utils/timestamp.h"

#include "core/fair.h"
#include "http/http.h"
#include "core/wheel.h"

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

/* What the worker remembers of a request in flight (the result's user). */
typedef struct InFlight
{
	int64		id;
	int32		attempt;
	int32		max_attempts;
	Oid			owner;
	uint32		queue;			/* its (owner, queue, origin) lane in the fair
								 * share */
	TimestampTz scheduled_at;
	uint32		generation;		/* jf_guard_generation() when claimed */
} InFlight;

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

typedef struct WorkerState
{
	MemoryContext cxt;			/* long-lived allocations */
	MemoryContext turn_cxt;		/* what one turn allocates outside transactions */
	JfWheel    *wheel;
	struct taskmap_hash *map;	/* task id -> wheel handle */
	JfHttp	   *http;
	JfFair	   *fair;			/* due tasks parked per (owner, origin) */
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
} WorkerState;

/* feed.c: keeping the wheel in step with jobflow.tasks */
extern void jf_feed_init(WorkerState *ws);
extern void jf_feed_listen(void);
extern void jf_feed_forget_all(WorkerState *ws);
extern void jf_feed_rescue_running(WorkerState *ws, int64 *ids, int n,
								const char *why);
extern void jf_feed_process_notifications(WorkerState *ws);
extern bool jf_feed_take_wakeups(WorkerState *ws);
extern void jf_feed_housekeeping(WorkerState *ws, int64 now_ms);
extern void jf_feed_upsert(WorkerState *ws, int64 id, int64 due_ms, uint32 queue);
extern bool jf_feed_park(WorkerState *ws, int64 id, int64 due_ms);
extern bool jf_feed_take(uint64 id, uint32 queue, void *arg);
extern void jf_feed_recheck(WorkerState *ws, Datum ids, int64 now_ms);
extern uint64 jf_feed_map_memory(WorkerState *ws);

/* dispatch.c: due tasks -> claim -> HTTP -> outcomes */
typedef struct JfDispatch JfDispatch;

extern void jf_dispatch_init(WorkerState *ws);
extern void jf_dispatch_reconfigure(WorkerState *ws);
extern bool jf_dispatch_due(WorkerState *ws, int64 now_ms);
extern bool jf_dispatch_room_freed(WorkerState *ws);
extern void jf_dispatch_collect(WorkerState *ws);
extern void jf_dispatch_abandon(WorkerState *ws);
extern void jf_dispatch_recover(WorkerState *ws);
extern void jf_dispatch_rescue_strays(WorkerState *ws);
extern int64 jf_dispatch_deadline(WorkerState *ws);

/* log_writer.c: buffered, batched writes of outcomes */
typedef enum TaskOutcome
{
	OUTCOME_SUCCEEDED,
	OUTCOME_RETRY,
	OUTCOME_FAILED,
	OUTCOME_INTERRUPTED,		/* the worker stopped during the attempt */
	OUTCOME_UNSENT				/* the worker stopped before sending: the
								 * claim is undone, nothing is logged */
} TaskOutcome;

typedef struct OutcomeRow
{
	int64		id;
	int32		attempt;
	Oid			owner;
	TaskOutcome outcome;
	const char *state;			/* new task state */
	TimestampTz scheduled_at;
	TimestampTz started_at;		/* unset from OUTCOME_INTERRUPTED on */
	TimestampTz finished_at;
	TimestampTz next_run_at;	/* set for OUTCOME_RETRY only */
	int			http_status;	/* 0 = none */
	const char *error;			/* NULL = none */
	const char *response;		/* NULL = none; need not be valid text */
	size_t		response_len;
} OutcomeRow;

typedef struct JfLogWriter JfLogWriter;

extern JfLogWriter *jf_log_writer_create(void);
extern void jf_log_writer_add(JfLogWriter *lw, const OutcomeRow *row);
extern int	jf_log_writer_buffered(JfLogWriter *lw);
extern bool jf_log_writer_has_retry(JfLogWriter *lw, int64 id);
extern bool jf_log_writer_holds(JfLogWriter *lw, int64 id);
extern int	jf_log_writer_orphans(JfLogWriter *lw, int64 **ids);
extern void jf_log_writer_forget_orphans(JfLogWriter *lw, int n);
extern int64 jf_log_writer_deadline(JfLogWriter *lw);
extern void jf_log_writer_flush(JfLogWriter *lw);
extern void jf_log_writer_discard(JfLogWriter *lw);

/* worker.c */

#endif							/* JOBFLOW_WORKER_H */
