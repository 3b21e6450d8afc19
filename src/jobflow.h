/*-------------------------------------------------------------------------
 *
 * jobflow.h
 *	  Declarations shared by jobflow's backend modules: settings, the
 *	  shared-memory status block and the entry points of each module.
 *
 * The plain-C modules (wheel.h, cron.h, http.h) do not include this file:
 * they have no backend dependency.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_H
#define JOBFLOW_H

#include "postgres.h"

#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "datatype/timestamp.h"

#include "base/metrics.h"

#define JOBFLOW_VERSION "0.3.0"
#define JOBFLOW_CHANNEL "jobflow"

/* settings (jobflow.c) */
extern char *jobflow_database_name;	/* deprecated, ignored */
extern int	jobflow_max_databases;
extern int	jobflow_workers_per_database;
extern int	jobflow_horizon_s;
extern int	jobflow_max_body_size;
extern int	jobflow_max_headers_size;
extern int	jobflow_max_concurrent;
extern int	jobflow_max_per_host;
extern int	jobflow_max_per_owner;
extern double jobflow_max_rate_per_host;	/* requests/s, 0: no limit */

/* the range of dispatch rates, per host or per queue (requests a second) */
#define JF_MIN_RATE 0.001
#define JF_MAX_RATE 1000000.0
extern int	jobflow_max_response_size;
extern int	jobflow_max_redirects;
extern int	jobflow_log_batch_size;
extern int	jobflow_log_flush_ms;
extern int	jobflow_claim_batch_size;
extern int	jobflow_retry_base_ms;
extern int	jobflow_retry_max_ms;
extern int	jobflow_reconcile_ms;
extern int	jobflow_shutdown_grace_ms;
extern char *jobflow_deny_networks;
extern char *jobflow_allow_networks;
extern bool jobflow_follow_cross_origin_redirects;
extern int	jobflow_retention_s;
extern int	jobflow_prune_batch_size;
extern int	jobflow_max_queues_per_role;	/* 0: no limit */
extern int	jobflow_max_timers_per_role;	/* 0: no limit */

/*
 * jobflow_max_per_host, jobflow_log_flush_ms, jobflow_retry_base_ms and
 * jobflow_reconcile_ms hold the values in effect, bounded by the rules
 * between settings (jobflow.c); this warns about each value so bounded.
 */
extern void jobflow_report_setting_rules(void);
extern bool jobflow_dispatch;

/*
 * What the worker publishes for other backends: the due time before which
 * it wants to be told about new tasks (so that schedule() only sends NOTIFY
 * when the worker needs it) and the figures jobflow.worker_status() shows.  Counters
 * are atomics written by the worker alone; readers tolerate torn snapshots
 * across fields.
 */
/* id ranges of committed tasks waiting for the worker to load them */
#define JF_WAKE_RING 1024

typedef struct JfWakeRange
{
	Oid			dboid;
	int64		lo;
	int64		hi;
} JfWakeRange;

/*
 * Cron timers and queues whose rows a committed transaction changed, for
 * the worker to read again by key (changes.c): as many as fit, else the
 * worker reads them all.  Each names its database, so that what a slot
 * kept for the database it served before is never taken for this one's.
 */
#define JF_WAKE_TIMERS 256
#define JF_WAKE_QUEUES 128
/* a queue name: 63 bytes at most (task_check.c), and a NUL */
#define JF_QUEUE_NAME_SIZE 64

typedef struct JfTimerWake
{
	Oid			dboid;
	int64		id;
} JfTimerWake;

typedef struct JfQueueKey
{
	Oid			dboid;
	Oid			owner;
	char		name[JF_QUEUE_NAME_SIZE];
} JfQueueKey;

/*
 * What a prepared transaction would have woken the worker for, kept from
 * PREPARE TRANSACTION to COMMIT PREPARED (prepared.c).  GIDs are at most
 * 200 bytes (GIDSIZE in access/xact.h).
 */
#define JF_PREPARED_MAX 16
#define JF_GID_SIZE 200

#define JF_PREPARED_KEYS 4

typedef struct JfPreparedWake
{
	Oid			dboid;			/* InvalidOid: free */
	char		gid[JF_GID_SIZE];
	int64		lo;				/* the ids it wrote, lo > hi: none */
	int64		hi;
	bool		cron;			/* every cron timer (too many, or unknown) */
	bool		queues;			/* every queue of jobflow.queues, likewise */
	int			ntimers;		/* else the timers it wrote */
	int64		timer_ids[JF_PREPARED_KEYS];
	int			nqueues;		/* and the queues */
	JfQueueKey	queue_keys[JF_PREPARED_KEYS];
} JfPreparedWake;

/*
 * One database's slot (launcher.c assigns them, jobflow.max_databases of
 * them).  The fields up to "incarnation" change under the launcher's lock
 * only (see launcher.c); the rest is this database's worker's, as the one
 * worker's block was before there were several.
 */
typedef struct JobflowShared
{
	Oid			dboid;			/* InvalidOid: the slot is free */
	int			part;			/* which of the database's workers (0: the
								 * first, which also runs cron and pruning) */
	uint32		incarnation;	/* changes each time the slot is assigned */
	bool		registered;		/* a worker is registered for the slot */
	bool		requested;		/* CREATE EXTENSION since the worker looked */
	pg_atomic_uint32 recheck;	/* DROP EXTENSION: check the extension now */

	slock_t		mutex;			/* protects worker_pid and latch */
	pid_t		worker_pid;		/* 0 when no worker is attached */
	Latch	   *worker_latch;
	pg_atomic_uint64 horizon_end_ms;	/* unix ms: end of the loaded horizon */
	pg_atomic_uint64 notify_before_ms;	/* unix ms; 0 = tell me everything */
	pg_atomic_uint64 wheel_tasks;
	pg_atomic_uint64 wheel_bytes;	/* wheel plus id map */
	pg_atomic_uint64 in_flight;
	pg_atomic_uint64 queued;
	pg_atomic_uint64 buffered_rows;
	pg_atomic_uint64 last_flush_ms;
	pg_atomic_uint64 started_ms;
	pg_atomic_uint64 fired;
	pg_atomic_uint64 succeeded;
	pg_atomic_uint64 failed;
	pg_atomic_uint64 retried;
	pg_atomic_uint64 flushes;
	pg_atomic_uint64 flushed_rows;
	pg_atomic_uint64 statements;
	pg_atomic_uint64 pruned_tasks;	/* retention (prune.c) */
	pg_atomic_uint64 pruned_log_rows;
	JfMetricsShared metrics;	/* histograms and counters (metrics.c) */

	/*
	 * Wake-ups: written at commit by the transactions whose tasks the
	 * worker must load (task_check.c), read by the worker.  Only a backend
	 * that wrote tasks or timers can put anything here, so, unlike a
	 * NOTIFY payload, nothing here can be forged by a role without grants.
	 */
	pg_atomic_uint64 wake_ranges;	/* ranges published, since start */
	pg_atomic_uint64 wake_timers;	/* timer changes published */
	pg_atomic_uint64 queues_version;	/* commits that changed jobflow.queues */
	slock_t		wake_mutex;
	int			nwake;
	bool		wake_overflowed;	/* ranges were lost: rescan */
	bool		wake_cron;		/* cron timers changed: look at all of them */
	JfWakeRange wake[JF_WAKE_RING];
	/* the timers and queues committed transactions changed (changes.c) */
	int			ntimer_wakes;
	JfTimerWake timer_wakes[JF_WAKE_TIMERS];
	int			nqueue_wakes;
	JfQueueKey	queue_wakes[JF_WAKE_QUEUES];
	/* prepared transactions' wake-ups, under wake_mutex (prepared.c) */
	JfPreparedWake prepared[JF_PREPARED_MAX];
	int			prepared_lost;	/* prepared, not kept: unknown COMMIT
								 * PREPAREDs that mean "everything" */
} JobflowShared;

/* the worker's own slot (NULL in other processes: see jf_db_slot) */
extern JobflowShared *jobflow_shared;
/* where its counters and histograms go: its database's first worker's slot */
extern JobflowShared *jobflow_figures;
/* which of its database's jobflow.workers_per_database workers it is */
extern int	jobflow_worker_part;

/* most workers per database (jobflow.workers_per_database) */
#define JF_MAX_WORKERS_PER_DB 8

/*
 * Whether task id is this worker's: with several workers per database,
 * the first serves the tasks of cron timers (so that catching up on missed
 * occurrences stays in one place), and each serves the other ids equal to
 * its part modulo their number, so no task is ever claimed by two and
 * every task has one.
 */
static inline bool
jf_worker_owns(int64 id, bool cron)
{
	int64		n = jobflow_workers_per_database;

	if (n <= 1)
		return true;
	if (cron)
		return jobflow_worker_part == 0;
	return ((id % n) + n) % n == jobflow_worker_part;
}

/* The same, in SQL over jobflow.tasks t, with $N and $part as parameters. */
#define JF_OWNS_SQL(n, part) \
	"(" n " = 1 OR CASE WHEN t.cron_id IS NOT NULL THEN " part " = 0" \
	" ELSE (t.id % " n " + " n ") % " n " = " part " END)"

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

/* jobflow.c: set up a slot at shared memory creation; zero its figures */
extern void jobflow_init_slot(JobflowShared *s);
extern void jobflow_reset_slot(JobflowShared *s);
/* jobflow.c: this database's slot for readers (zeros when unserved) */
extern JobflowShared *jobflow_reader_slot(void);
extern uint64 jobflow_gauge_sum(size_t offset);
extern int	jobflow_workers_up(void);

/* jobflow.c: the due time before which new tasks must wake the worker */
extern TimestampTz jobflow_notify_before(void);
extern void jobflow_publish_wake(const int64 *lo, const int64 *hi, int n,
								 bool cron, bool queues);

/*
 * changes.c: the timers and queues a committed transaction changed, by
 * key; NULL keys (or more than fit) make the worker read all of them.
 */
extern void jf_publish_changes(const int64 *timer_ids, int ntimers, bool all_timers,
							   const JfQueueKey *queues, int nqueues, bool all_queues);

/*
 * cron_sql.c: occurrences due before this are "missed" and follow their
 * timer's policy (0: before now minus a grace).  The worker sets it to the
 * server's start, so that occurrences a worker restarted by errors did not
 * fire still fire, late, and to the time dispatching resumes after the
 * switch was off.
 */
extern TimestampTz jobflow_cron_missed_before;

/* cron_sql.c: the worker's next materialisations look at these timers only */
extern void jf_cron_only(const int64 *ids, int n);

/* true in the jobflow worker process only (worker.c) */
extern bool jobflow_am_worker;

/* worker.c */
extern PGDLLEXPORT void jobflow_worker_main(Datum main_arg);

#endif							/* JOBFLOW_H */
