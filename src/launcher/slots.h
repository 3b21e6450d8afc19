/*-------------------------------------------------------------------------
 *
 * slots.h
 *	  The per-database slots of shared memory (slots.c): one for each
 *	  worker, with its status, its wake-up rings and its figures, found by
 *	  database from any backend.
 *
 * The launcher assigns slots (launcher.c); a worker attaches to its own;
 * backends publish wake-ups into the slots of their database (wake.c) and
 * read the figures (api/status.c, api/metrics.c).  Counters are atomics
 * written by the worker alone; readers tolerate torn snapshots across
 * fields.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_SLOTS_H
#define JOBFLOW_SLOTS_H

#include "postgres.h"

#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/spin.h"

#include "base/metrics.h"
#include "base/settings.h"

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
 * the worker to read again by key (api/changes.c): as many as fit, else the
 * worker reads them all.  Each names its database, so that what a slot
 * kept for the database it served before is never taken for this one's.
 */
#define JF_WAKE_TIMERS 256
#define JF_WAKE_QUEUES 128
/* a queue name: 63 bytes at most (api/task_check.c), and a NUL */
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
 * only (see slots.c); the rest is this database's worker's, as the one
 * worker's block was before there were several.
 */
typedef struct JfSlot
{
	Oid			dboid;			/* InvalidOid: the slot is free */
	int			part;			/* which of the database's workers (0: the
								 * first, which also runs cron and pruning) */
	uint32		incarnation;	/* changes each time the slot is assigned */
	bool		registered;		/* a worker is registered for the slot */
	bool		requested;		/* CREATE EXTENSION since the worker looked */
	pg_atomic_uint32 recheck;	/* DROP EXTENSION, subscriptions: look now */

	slock_t		mutex;			/* protects worker_pid, latch and the
								 * circuit resets */
	pid_t		worker_pid;		/* 0 when no worker is attached */
	Latch	   *worker_latch;
	/* circuits to close, asked by jobflow.reset_circuit() (api/circuits.c) */
	int			ncircuit_resets;
	JfCircuitReset circuit_resets[JF_CIRCUIT_RESETS];
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
	pg_atomic_uint64 held;		/* why it claims nothing: JfHeldReason */
	pg_atomic_uint64 pruned_tasks;	/* retention (prune.c) */
	pg_atomic_uint64 pruned_log_rows;
	pg_atomic_uint64 prune_behind_ms;	/* unix ms since pruning has had a
										 * backlog; 0 while it keeps up */
	pg_atomic_uint64 last_turn_ms;	/* unix ms of its loop's last turn */
	JfMetricsShared metrics;	/* histograms and counters (base/metrics.c) */

	/*
	 * Wake-ups: written at commit by the transactions whose tasks the
	 * worker must load (api/commit_wake.c), read by the worker.  Only a backend
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
	/* the timers and queues committed transactions changed (api/changes.c) */
	int			ntimer_wakes;
	JfTimerWake timer_wakes[JF_WAKE_TIMERS];
	int			nqueue_wakes;
	JfQueueKey	queue_wakes[JF_WAKE_QUEUES];
	/* prepared transactions' wake-ups, under wake_mutex (prepared.c) */
	JfPreparedWake prepared[JF_PREPARED_MAX];
	int			prepared_lost;	/* prepared, not kept: unknown COMMIT
								 * PREPAREDs that mean "everything" */
} JfSlot;

/* why a worker claims nothing (JfSlot.held), for worker_status() and metrics */
typedef enum JfHeldReason
{
	JF_HELD_NO,
	JF_HELD_SWITCH,				/* jobflow.dispatch = off */
	JF_HELD_SUBSCRIPTION,		/* auto, and the database subscribes */
	JF_HELD_RESTORE,			/* a restore of jobflow's tables */
	JF_HELD_SEQUENCE,			/* a sequence behind its table */
	JF_HELD_UPDATE,				/* waits for ALTER EXTENSION UPDATE */
	JF_HELD_REASONS
} JfHeldReason;
extern const char *const jf_held_names[JF_HELD_REASONS];

/* the worker's own slot (NULL in other processes: see jf_db_slot) */
extern JfSlot *jf_my_slot;
/* where its counters and histograms go: its database's first worker's slot */
extern JfSlot *jf_figures;
/* which of its database's jobflow.workers_per_database workers it is */
extern int	jf_worker_part;
/* true in jobflow's workers only (and in no other process) */
extern bool jf_am_worker;

/* _PG_init and the shmem startup hook */
extern Size jf_slots_shmem_size(void);
extern void jf_slots_shmem_init(void);
extern int	jf_slots_count(void);

/* any backend: the slot(s) serving a database, NULL (0) when none does */
extern JfSlot *jf_db_slot(Oid dboid);
extern int	jf_db_slots(Oid dboid, JfSlot **by_part);
extern void jf_slot_wake(JfSlot *s, Oid dboid);
extern void jf_db_wake(Oid dboid, bool recheck);

/* this database's slot for readers (zeros when unserved), and its gauges */
extern JfSlot *jf_reader_slot(void);
extern uint64 jf_gauge_sum(size_t offset);
extern int	jf_workers_up(void);
extern int	jf_databases_served(bool *launcher_up);

/* the launcher: a slot's figures from zero, before it serves a database */
extern void jf_slot_reset(JfSlot *s);

/* the worker: its slot before it connects, and how it leaves */
extern JfSlot *jf_worker_attach(Datum main_arg, Oid *dboid);
extern void jf_worker_detach(void);
extern void jf_worker_clear_requested(void);
extern bool jf_worker_release(void);
extern int	jf_worker_exit_code(void);
extern bool jf_worker_recheck_pending(void);

#endif							/* JOBFLOW_SLOTS_H */
