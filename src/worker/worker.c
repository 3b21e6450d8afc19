/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  jobflow's background worker: lifecycle and the wait loop that drives
 *	  the wheel feeder, the HTTP dispatcher and the log writer.
 *
 * One loop, one thread.  Each turn: drain notifications, collect finished
 * requests, fire what is due, run housekeeping when its time has come,
 * write outcomes when the batch is full or old enough, then sleep on one
 * WaitEventSet (latch, postmaster death, libcurl's epoll fd) until the
 * earliest of the wheel's next deadline, libcurl's next timeout, the log
 * writer's deadline and the next housekeeping.  Nothing ticks: an idle
 * worker sleeps until its next reconciliation scan.
 *
 * The worker runs with session_replication_role = replica, so the row
 * checks and notify triggers of jobflow.tasks stay out of its own writes
 * (they are for applications; the worker's statements guard themselves),
 * and with synchronous_commit off but for its claims (see dispatch.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/resource.h>

#include "worker/worker.h"
#include "base/compat.h"
#include "base/fault.h"
#include "core/circuit.h"
#include "launcher/prepared.h"
#include "launcher/restore.h"
#include "worker/cron.h"
#include "worker/dispatch.h"
#include "worker/feed.h"
#include "worker/guard.h"
#include "worker/log_writer.h"
#include "worker/prune.h"
#include "worker/queues.h"
#include "worker/schema_version.h"
#include "worker/state.h"
#include "worker/xact.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "access/xact.h"
#include "commands/async.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/bufmgr.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"

#define EXTENSION_WAIT_MS 10000
/* earliest rescan after dropped notifications, to bound what spoofing costs */
#define RESCAN_SOON_MS 100
/* errors in a row after which the worker exits and is restarted */
#define MAX_CONSECUTIVE_ERRORS 10
/* longest the worker waits for a lock; lock timeouts never make it exit */
#define LOCK_TIMEOUT "1s"

static volatile int consecutive_errors = 0;
static volatile bool starting = false;	/* in start_serving() */

static volatile sig_atomic_t got_sigterm = false;
/* synchronous_commit from the server's configuration (see worker main) */
static char cluster_sync_commit[32];

static void
handle_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	got_sigterm = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

/* the database served, for messages */
static char worker_dbname[NAMEDATALEN] = "";

/* the busiest origins: published at most this often, sweeping this many */
#define HOSTS_PUBLISH_MS 1000
#define HOSTS_SWEEP 1024

/* what the metrics keep is what the fair share and libcurl's layer give */
StaticAssertDecl(JF_METRICS_CLASSES == JF_NCLASS, "outcome classes");
StaticAssertDecl(JF_METRICS_TOP == JF_FAIR_TOP, "busiest origins");
StaticAssertDecl(JF_METRICS_ORIGIN_MAX == JF_FAIR_ORIGIN_MAX, "origin size");

/*
 * The worker's own: when it may publish the busiest origins next, and
 * whether what is published may show some (true at its start: an earlier
 * worker's may still be there).
 */
static int64 hosts_next_ms = 0;
static bool hosts_shown = true;

/*
 * Publish the busiest origins (the worker, once per turn).  At most once a
 * second, so that a busy loop pays for it rarely; each time the fair share
 * also sweeps HOSTS_SWEEP more origins for ones its table missed.
 */
static void
publish_hosts(JfFair *f)
{
	JfMetricsShared *m = &jf_my_slot->metrics;
	JfFairLoad	top[JF_FAIR_TOP];
	int64		now = jf_now_ms();
	int			n;
	int			i;

	if (f == NULL || now < hosts_next_ms)
		return;
	hosts_next_ms = now + HOSTS_PUBLISH_MS;
	n = jf_fair_busiest(f, top, HOSTS_SWEEP);
	if (n == 0 && !hosts_shown)
		return;
	pg_atomic_fetch_add_u32(&m->hosts_changecount, 1);	/* a full barrier */
	for (i = 0; i < n; i++)
	{
		strlcpy(m->hosts[i].origin, top[i].origin, sizeof(m->hosts[i].origin));
		m->hosts[i].in_flight = top[i].claimed;
		m->hosts[i].queued = top[i].parked;
	}
	m->nhosts = n;
	pg_write_barrier();
	pg_atomic_fetch_add_u32(&m->hosts_changecount, 1);
	hosts_shown = n > 0;
}

/* the circuits: published when one changes state, else at most this often */
#define CIRCUITS_PUBLISH_MS 1000
static int64 circuits_next_ms = 0;
static bool circuits_shown = true;

StaticAssertDecl(JF_METRICS_CIRCUITS <= JF_FAIR_PARKED_OF_MAX, "held tasks of each circuit shown");
StaticAssertDecl(JF_CIRCUIT_CLOSED == 0 && JF_CIRCUIT_OPEN == 1 &&
				 JF_CIRCUIT_HALF_OPEN == 2, "circuit states as api/circuits.c names them");

/*
 * Close the circuits jobflow.reset_circuit() named since the last turn
 * (the backend wakes the worker after asking).
 */
static void
take_circuit_resets(JfWorkerState *ws)
{
	JfCircuitReset resets[JF_CIRCUIT_RESETS];
	int			n;
	int			i;

	if (ws->circuits == NULL || jf_my_slot->ncircuit_resets == 0)
		return;
	SpinLockAcquire(&jf_my_slot->mutex);
	n = Min(jf_my_slot->ncircuit_resets, JF_CIRCUIT_RESETS);
	memcpy(resets, jf_my_slot->circuit_resets, sizeof(JfCircuitReset) * n);
	jf_my_slot->ncircuit_resets = 0;
	SpinLockRelease(&jf_my_slot->mutex);
	for (i = 0; i < n; i++)
	{
		resets[i].origin[sizeof(resets[i].origin) - 1] = '\0';
		jf_dispatch_reset_circuits(ws, resets[i].owner, resets[i].origin);
	}
}

/*
 * Publish the circuits that count failures or are open (the worker, once
 * per turn): at once after a change of state, else at most once a second,
 * and not at all while there are none and none is shown.  With each,
 * the due tasks it holds, counted in one look at the lanes with parked
 * tasks.
 */
static void
publish_circuits(JfWorkerState *ws)
{
	JfMetricsShared *m = &jf_my_slot->metrics;
	JfCircuitInfo list[JF_METRICS_CIRCUITS];
	uint32		owners[JF_METRICS_CIRCUITS];
	const char *origins[JF_METRICS_CIRCUITS];
	size_t		held[JF_METRICS_CIRCUITS];
	int64		now = jf_now_ms();
	int			n;
	int			i;

	if (ws->circuits == NULL || ws->fair == NULL)
		return;
	if (!ws->circuits_changed && now < circuits_next_ms)
		return;
	if (!ws->circuits_changed && !circuits_shown && jf_circuits_count(ws->circuits) == 0)
		return;
	ws->circuits_changed = false;
	circuits_next_ms = now + CIRCUITS_PUBLISH_MS;
	n = jf_circuits_list(ws->circuits, list, JF_METRICS_CIRCUITS, now);
	for (i = 0; i < n; i++)
	{
		owners[i] = list[i].owner;
		origins[i] = list[i].origin;
	}
	jf_fair_parked_of(ws->fair, n, owners, origins, held);
	pg_atomic_fetch_add_u32(&m->circuits_changecount, 1);	/* a full barrier */
	for (i = 0; i < n; i++)
	{
		JfCircuitShared *c = &m->circuits[i];

		strlcpy(c->origin, list[i].origin, sizeof(c->origin));
		c->owner = list[i].owner;
		c->state = (int32) list[i].state;
		c->failures = list[i].failures;
		c->since_ms = list[i].since_ms;
		c->next_probe_ms = list[i].next_probe_ms;
		c->held = list[i].state == JF_CIRCUIT_CLOSED ? 0 : (int64) held[i];
	}
	m->ncircuits = n;
	m->circuits_open = jf_circuits_open(ws->circuits);
	pg_write_barrier();
	pg_atomic_fetch_add_u32(&m->circuits_changecount, 1);
	circuits_shown = n > 0;
}

/*
 * When the worker must wake to publish again: while anything is claimed
 * or parked, or the last publication still shows origins; never when
 * idle with nothing shown.
 */
static int64
hosts_deadline(const JfFair *f)
{
	if (f != NULL && (hosts_shown || jf_fair_claimed(f) > 0 || jf_fair_parked(f) > 0))
		return hosts_next_ms;
	return PG_INT64_MAX;
}

/* What worker_status() and the metrics show of the wheel and the requests. */
static void
publish_stats(JfWorkerState *ws)
{
	JfSlot	   *first = jf_db_slot(MyDatabaseId);

	/* the first worker's slot, where counters add up, may have been replaced */
	jf_figures = first != NULL ? first : jf_my_slot;
	jf_metrics_attach(&jf_figures->metrics);
	pg_atomic_write_u64(&jf_my_slot->last_turn_ms, (uint64) jf_now_ms());
	pg_atomic_write_u64(&jf_my_slot->wheel_tasks, jf_wheel_count(ws->wheel));
	pg_atomic_write_u64(&jf_my_slot->wheel_bytes,
						jf_wheel_memory(ws->wheel) + jf_feed_map_memory(ws) +
						(ws->fair ? jf_fair_memory(ws->fair) : 0));
	if (ws->http != NULL)
	{
		pg_atomic_write_u64(&jf_my_slot->in_flight, jf_http_in_flight(ws->http));
		pg_atomic_write_u64(&jf_my_slot->queued,
							jf_http_queued(ws->http) + jf_fair_parked(ws->fair));
		publish_hosts(ws->fair);
		publish_circuits(ws);
	}
}

static void
detach_shared(int code, Datum arg)
{
	jf_worker_detach();
}

/* SIGTERM: for good if the database is held (see launcher/hook.c), else 1. */
static void
exit_worker(void)
{
	proc_exit(jf_worker_exit_code());
}

/*
 * Whether the extension is here at this library's version.  Absent, the
 * worker has nothing to serve: it frees its slot and exits for good,
 * unless CREATE EXTENSION ran meanwhile (then it looks again).
 */
static bool
extension_ready(void)
{
	JfSchemaState state;

	for (;;)
	{
		jf_worker_clear_requested();
		jf_xact_begin("jobflow: checking the version of extension jobflow");
		/* absent or older than this library: logs once what to run */
		state = jf_schema_state();
		jf_xact_commit();
		if (state != JF_SCHEMA_ABSENT)
			return state == JF_SCHEMA_READY;
		if (jf_worker_release())
		{
			ereport(LOG,
					(errmsg("jobflow worker for database \"%s\" stops: the database has no extension jobflow",
							worker_dbname)));
			proc_exit(0);
		}
	}
}

/*
 * Until ALTER EXTENSION UPDATE (see schema_version.c) runs there is
 * nothing to do.  Its script sends NOTIFY jobflow, which wakes us at once;
 * the timeout is only a fallback.  Meanwhile the slot says why the worker
 * claims nothing ("update"), and that it still turns, for monitoring; the
 * reason it held for before comes back after.
 */
static void
wait_for_extension(JfWorkerState *ws, bool logged)
{
	uint64		held_before = pg_atomic_read_u64(&jf_my_slot->held);
	bool		waited = false;

	while (!extension_ready())
	{
		waited = true;
		pg_atomic_write_u64(&jf_my_slot->held, (uint64) JF_HELD_UPDATE);
		pg_atomic_write_u64(&jf_my_slot->last_turn_ms, (uint64) jf_now_ms());
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 EXTENSION_WAIT_MS, jf_wait_event(JF_WAIT_SCHEMA));
		ResetLatch(MyLatch);
		if (got_sigterm)
			exit_worker();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			jf_settings_report_rules();
		}
		if (notifyInterruptPending)
			jf_feed_process_notifications(ws);
	}
	if (waited)
		pg_atomic_write_u64(&jf_my_slot->held, held_before);
}

/*
 * libcurl may hold two sockets per allowed request (one in flight, one idle
 * in its connection cache).  Raise the soft descriptor limit to cover that
 * rather than fail connections with EMFILE under a burst.
 */
static void
raise_fd_limit(void)
{
	struct rlimit rl;
	rlim_t		want = (rlim_t) jobflow_max_concurrent * 2 + 64;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want) ? want : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < want)
		ereport(WARNING,
				(errmsg("jobflow worker can open only %lu files, fewer than jobflow.max_concurrent_requests needs",
						(unsigned long) rl.rlim_cur),
				 errhint("Raise the open files limit of the server, or lower jobflow.max_concurrent_requests.")));
}

/*
 * A burst leaves malloc holding the memory of thousands of requests and
 * responses (libcurl's, not palloc's): hand it back once the backlog has
 * drained, so an idle worker stays small.  Only after a backlog of at
 * least TRIM_AFTER_REQUESTS requests and buffered outcomes at once: under a
 * steady trickle every outcome flush empties the worker, and trimming then
 * (a walk of the heap and about ten madvise calls, 0.3 to 1 ms) held up
 * the next due task for memory that a few requests never took.
 */
#define TRIM_AFTER_REQUESTS 64

static void
release_memory(void)
{
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}

/* Milliseconds to sleep until deadline_ms, rounded up: never wake early. */
static long
ms_until(int64 deadline_ms)
{
	int64		now_us = GetCurrentTimestamp() + JF_EPOCH_DIFF_US;
	int64		wait_us;

	if (deadline_ms == PG_INT64_MAX)
		return -1;
	wait_us = deadline_ms * 1000 - now_us;
	if (wait_us <= 0)
		return 0;
	return (long) Min((wait_us + 999) / 1000, (int64) INT_MAX);
}

/*
 * The loop's chores (writing outcomes, housekeeping, pruning) each take a
 * transaction and from a few hundred microseconds to milliseconds.  One
 * that starts just before a task falls due holds the task up for as long
 * as it runs; under a steady load of 100 tasks a second an outcome flush
 * (1 to 2 ms, 17 a second) overlapped the next due task every few dozen
 * turns.  So a chore whose time has come waits while a task falls due
 * before it would end, at most CHORE_MAX_DEFER_MS: the loop fires the task
 * first and runs the chore in the same turn, right after.  A task already
 * due (a backlog) holds no chore back, and nothing waits longer than that
 * bound, whatever the load.  The cost of each chore is the decaying
 * maximum of its last runs.
 */
#define CHORE_MAX_DEFER_MS 10
#define CHORE_MARGIN_US 500
#define CHORE_FIRST_COST_US 2000

typedef struct Chore
{
	int64		cost_us;
	int64		started_us;
} Chore;

static int64
now_us(void)
{
	return GetCurrentTimestamp() + JF_EPOCH_DIFF_US;
}

/*
 * Whether a chore due at deadline_ms runs now, the next task falling due
 * at next_due_ms; max_defer_ms bounds how long it may wait.
 */
static bool
chore_runs(Chore *c, int64 deadline_ms, int64 next_due_ms, int64 max_defer_ms)
{
	int64		now = now_us();

	if (now / 1000 < deadline_ms)
		return false;
	c->started_us = now;
	if (next_due_ms == PG_INT64_MAX || next_due_ms * 1000 <= now ||
		now / 1000 >= deadline_ms + max_defer_ms)
		return true;
	return next_due_ms * 1000 - now > c->cost_us + CHORE_MARGIN_US;
}

/* After a chore ran: what it took goes into its cost. */
static void
chore_done(Chore *c)
{
	int64		took = now_us() - c->started_us;

	c->cost_us = Max(took, c->cost_us - c->cost_us / 8);
}

/*
 * When the loop must come back for a chore: its deadline, or, if it waits
 * for a due task, the end of its wait (the task's deadline wakes the loop
 * before).
 */
static int64
chore_wake(int64 deadline_ms, bool waiting, int64 max_defer_ms)
{
	return waiting ? deadline_ms + max_defer_ms : deadline_ms;
}

/* When housekeeping is due: its schedule, or soon after dropped notifications. */
static int64
housekeeping_deadline(JfWorkerState *ws)
{
	if (ws->rescan_soon)
		return Min(ws->next_housekeeping_ms, ws->last_housekeeping_ms + RESCAN_SOON_MS);
	return ws->next_housekeeping_ms;
}

/*
 * Microseconds to sleep until deadline_ms (-1: no deadline).  The loop
 * waits whole milliseconds rounded down, then, if nothing woke it, sleeps
 * what is left under a millisecond, so that a task fires within
 * microseconds of its time: rounded up to the millisecond, as
 * WaitEventSetWait counts, the wait made every task half a millisecond
 * late on average, and up to one.  Nothing fires early either way: the
 * wheel only gives what is due by the clock.
 */
static int64
us_until(int64 deadline_ms)
{
	int64		wait_us;

	if (deadline_ms == PG_INT64_MAX)
		return -1;
	wait_us = deadline_ms * 1000 - now_us();
	return Max(wait_us, 0);
}

/*
 * SIGTERM: claim nothing new, give requests in flight jobflow.shutdown_grace
 * to finish, then abandon the rest and write every buffered outcome.
 */
static void
shut_down(JfWorkerState *ws, WaitEventSet *wes)
{
	int64		give_up = jf_now_ms() + jobflow_shutdown_grace_ms;

	ws->stopping = true;
	while (jf_http_in_flight(ws->http) + jf_http_queued(ws->http) > 0 &&
		   jf_now_ms() < give_up)
	{
		WaitEvent	ev;
		long		timeout = ms_until(give_up);
		long		http_timeout = jf_http_timeout_ms(ws->http);

		if (http_timeout >= 0)
			timeout = Min(timeout, http_timeout);
		(void) WaitEventSetWait(wes, timeout, &ev, 1, jf_wait_event(JF_WAIT_MAIN));
		ResetLatch(MyLatch);
		jf_dispatch_collect(ws);
	}
	jf_dispatch_abandon(ws);
	jf_log_writer_flush(ws->log);
	ereport(LOG, (errmsg("jobflow worker stopped")));
}

/*
 * The extension the worker served was dropped (guard.c noticed at the start
 * of a transaction, before it touched anything).  Whatever the worker held
 * for it goes: buffered outcomes and orphans now, results of requests still
 * in flight as they arrive (their generation is over), wheel entries by a
 * full reload.  Then, if CREATE EXTENSION ran again meanwhile, it serves
 * the new one from scratch; if not, it exits and frees its slot.
 */
static void
serve_again(JfWorkerState *ws)
{
	ereport(LOG,
			(errmsg("jobflow worker lost extension jobflow in database \"%s\" (DROP EXTENSION); it forgets the outcomes of its requests in flight",
					worker_dbname)));
	jf_log_writer_discard(ws->log);
	jf_feed_forget_all(ws);
	ws->loaded_until_ms = PG_INT64_MIN;
	ws->next_housekeeping_ms = 0;
	consecutive_errors = 0;
	wait_for_extension(ws, true);
	jf_guard_serve();
	if (jf_guard_hold(jf_now_ms()) == JF_HOLD_NONE)
		jf_feed_rescue_running(ws, NULL, 0, NULL);
}

/*
 * Why the worker claims nothing now, if it does not: jobflow.dispatch is
 * off or, auto, its database subscribes to jobflow's tables (guard.c: the
 * worker then holds whole, writing nothing of its own), a restore of
 * jobflow's tables is in progress, or a sequence is behind its table (last
 * seen by the materialiser's check).  Each change is logged once and
 * published in the slot.  On resuming, a full reload with catch-up: tasks
 * due meanwhile fire, cron occurrences follow their missed policy, and
 * running tasks nobody holds (a publisher's attempts in flight when it
 * stopped) go back to pending.
 */
static bool
dispatch_paused(JfWorkerState *ws, bool *whole)
{
	static JfHeldReason last = JF_HELD_NO;
	JfHeldReason now;
	JfHold		hold = jf_guard_hold(jf_now_ms());
	bool		was_whole = last == JF_HELD_SWITCH || last == JF_HELD_SUBSCRIPTION;

	if (hold == JF_HOLD_OFF)
		now = JF_HELD_SWITCH;
	else if (hold == JF_HOLD_SUBSCRIBED)
		now = JF_HELD_SUBSCRIPTION;
	else if (jf_restore_in_progress())
		now = JF_HELD_RESTORE;
	else if (ws->sequences_behind)
		now = JF_HELD_SEQUENCE;
	else
		now = JF_HELD_NO;
	*whole = now == JF_HELD_SWITCH || now == JF_HELD_SUBSCRIPTION;
	if (now == last)
		return now != JF_HELD_NO;
	pg_atomic_write_u64(&jf_my_slot->held, (uint64) now);
	if (was_whole && !*whole)
	{
		/* what it left alone: all of it again, strays and missed timers */
		jf_cron_missed_before = GetCurrentTimestamp();
		ws->loaded_until_ms = PG_INT64_MIN;
		ws->next_housekeeping_ms = 0;
		ws->strays_look_ms = 0;
	}
	switch (now)
	{
		case JF_HELD_NO:
			ereport(LOG, (errmsg("jobflow worker resumes dispatching")));
			/* occurrences due while it was off follow their missed policy */
			jf_cron_missed_before = GetCurrentTimestamp();
			/* this turn's housekeeping catches up first; the next one fires */
			ws->loaded_until_ms = PG_INT64_MIN;
			ws->next_housekeeping_ms = 0;
			SetLatch(MyLatch);
			last = now;
			return true;
		case JF_HELD_SWITCH:
			ereport(LOG,
					(errmsg("jobflow worker holds: jobflow.dispatch is off"),
					 errdetail("It claims nothing and writes nothing to jobflow's tables; tasks stay pending and fire when it is auto or on again.")));
			break;
		case JF_HELD_SUBSCRIPTION:
			ereport(LOG,
					(errmsg("jobflow worker holds: database \"%s\" receives jobflow's tables by logical replication",
							worker_dbname),
					 errdetail("It claims nothing and writes nothing to jobflow's tables while a subscription includes them."),
					 errhint("Once this database is the primary, drop the subscription or set jobflow.dispatch = on.")));
			break;
		case JF_HELD_RESTORE:
			ereport(LOG,
					(errmsg("jobflow worker pauses: jobflow's tables are being restored in database \"%s\"",
							worker_dbname),
					 errdetail("It claims and materialises nothing until the restoring session ends.")));
			break;
		case JF_HELD_SEQUENCE:
			ereport(LOG,
					(errmsg("jobflow worker pauses: a sequence of jobflow is behind its table"),
					 errdetail("jobflow.tasks_id_seq or jobflow.cron_timers_id_seq would hand out ids already in use, as in a restore that has not set them yet."),
					 errhint("If no restore is in progress, set them, e.g. SELECT setval('jobflow.tasks_id_seq', max(id)) FROM jobflow.tasks.")));
			break;
		case JF_HELD_UPDATE:	/* wait_for_extension's, never this one's */
		case JF_HELD_REASONS:
			break;
	}
	last = now;
	return now != JF_HELD_NO;
}

/*
 * One turn per wake-up until SIGTERM; see the file header.  A turn that
 * completes clears the error count of the recovery in jobflow_worker_main.
 */
static void
run_loop(JfWorkerState *ws, WaitEventSet *wes)
{
	bool		busy = false;
	Chore		housekeeping = {CHORE_FIRST_COST_US, 0};
	Chore		flush = {CHORE_FIRST_COST_US, 0};
	Chore		prune = {CHORE_FIRST_COST_US, 0};
	int64		most_held = 0;	/* requests and outcomes held at once since
								 * the last trim */

	while (!got_sigterm)
	{
		WaitEvent	ev;
		int64		requests;
		bool		whole;
		int64		next_due;
		int64		housekeeping_at;
		int64		flush_defer_ms;
		bool		housekeeping_waits;
		bool		flush_waits;
		bool		prune_waits;
		bool		more_due;
		bool		paused;
		int64		deadline;
		int64		wait_us;
		long		timeout;
		long		http_timeout;
		TimestampTz turn_start;

		turn_start = GetCurrentTimestamp();
		/* what a turn allocates outside its transactions goes with it */
		MemoryContextReset(ws->turn_cxt);
		MemoryContextSwitchTo(ws->turn_cxt);
		jf_fault("turn");
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			jf_settings_report_rules();
			raise_fd_limit();
			jf_dispatch_reconfigure(ws);
			jf_guard_look_soon();
		}
		if (notifyInterruptPending)
			jf_feed_process_notifications(ws);
		/* DROP EXTENSION committed here: the incarnation check sees it */
		/* and subscriptions changed (launcher/hook.c): look at them now */
		if (jf_worker_recheck_pending())
		{
			jf_xact_begin("jobflow: checking extension jobflow");
			jf_xact_commit();
			jf_guard_look_soon();
		}
		more_due = jf_feed_take_wakeups(ws);
		take_circuit_resets(ws);

		jf_dispatch_collect(ws);
		/* held whole: nothing of its own is written (see guard.c) */
		paused = dispatch_paused(ws, &whole);
		/* the first of the database's workers sweeps for all of them */
		if (!whole && jf_worker_part == 0 && jf_guard_roles_due(jf_now_ms()))
			jf_guard_sweep_roles();
		if (jf_queues_refresh(ws, false))
			jf_prune_reset_mark(ws->prune);
		/* circuits opened or closed: their owners hear of it */
		if (!whole)
			jf_dispatch_notify_circuits(ws);
		/* paused: the wheel's deadlines do not wake the loop */
		if (!paused)
			more_due |= jf_dispatch_due(ws, jf_now_ms());
		/* chores wait for a task about to fall due (see Chore) */
		next_due = paused ? PG_INT64_MAX :
			Min(jf_wheel_next_deadline(ws->wheel), jf_dispatch_deadline(ws));
		housekeeping_at = housekeeping_deadline(ws);
		flush_defer_ms = Min(CHORE_MAX_DEFER_MS, jobflow_log_flush_ms);
		housekeeping_waits = flush_waits = prune_waits = false;
		if (whole)
			housekeeping_waits = false;
		else if (chore_runs(&housekeeping, housekeeping_at, next_due, CHORE_MAX_DEFER_MS))
		{
			jf_feed_housekeeping(ws, jf_now_ms());
			chore_done(&housekeeping);
		}
		else
		{
			housekeeping_waits = jf_now_ms() >= housekeeping_at;
			/* lanes and origins made faster than housekeeping frees them */
			if (ws->fair != NULL && jf_fair_collect_due(ws->fair))
				(void) jf_fair_collect(ws->fair, jf_rate_clock_us(), JF_FAIR_COLLECT_LOOK,
									   JF_FAIR_COLLECT_FREE);
		}
		if (chore_runs(&flush, jf_log_writer_deadline(ws->log), next_due, flush_defer_ms))
		{
			jf_log_writer_flush(ws->log);
			jf_dispatch_outcomes_written(ws);
			chore_done(&flush);
		}
		else
			flush_waits = jf_now_ms() >= jf_log_writer_deadline(ws->log);
		if (!whole && jf_now_ms() >= ws->strays_look_ms)
			jf_dispatch_rescue_strays(ws);
		if (whole)
			prune_waits = false;
		else if (chore_runs(&prune, jf_prune_deadline(ws), next_due, CHORE_MAX_DEFER_MS))
		{
			jf_prune_turn(ws);
			chore_done(&prune);
		}
		else
			prune_waits = jf_now_ms() >= jf_prune_deadline(ws);
		publish_stats(ws);
		requests = jf_http_in_flight(ws->http) + jf_http_queued(ws->http);
		if (requests > 0)
		{
			busy = true;
			most_held = Max(most_held, requests + jf_log_writer_buffered(ws->log));
		}
		else if (busy && jf_log_writer_buffered(ws->log) == 0)
		{
			if (most_held >= TRIM_AFTER_REQUESTS)
				release_memory();
			busy = false;
			most_held = 0;
		}

		deadline = whole ? PG_INT64_MAX :
			chore_wake(housekeeping_deadline(ws), housekeeping_waits, CHORE_MAX_DEFER_MS);
		deadline = Min(deadline, chore_wake(jf_log_writer_deadline(ws->log), flush_waits,
											flush_defer_ms));
		if (!whole)
		{
			deadline = Min(deadline, chore_wake(jf_prune_deadline(ws), prune_waits,
												CHORE_MAX_DEFER_MS));
			deadline = Min(deadline, ws->strays_look_ms);
			if (jf_worker_part == 0)
				deadline = Min(deadline, jf_guard_roles_deadline());
		}
		deadline = Min(deadline, hosts_deadline(ws->fair));
		deadline = Min(deadline, jf_guard_hold_deadline());
		if (more_due || (!paused && jf_dispatch_room_freed(ws)))
			deadline = 0;
		else if (!paused)
		{
			deadline = Min(deadline, jf_wheel_next_deadline(ws->wheel));
			/* a rate's next token: parked tasks wait for it */
			deadline = Min(deadline, jf_dispatch_deadline(ws));
		}
		wait_us = us_until(deadline);
		jf_metrics_observe(JF_HIST_TURN, GetCurrentTimestamp() - turn_start);
		http_timeout = jf_http_timeout_ms(ws->http);
		if (http_timeout >= 0 && (wait_us < 0 || http_timeout * 1000 < wait_us))
			wait_us = http_timeout * 1000;
		if (wait_us > 0)
		{
			int64		wake_us = now_us() + wait_us;

			/* whole milliseconds first, then, unless woken, the rest */
			timeout = (long) Min(wait_us / 1000, (int64) INT_MAX);
			if (timeout > 0 &&
				WaitEventSetWait(wes, timeout, &ev, 1, jf_wait_event(JF_WAIT_MAIN)) > 0)
				ResetLatch(MyLatch);
			else if ((wait_us = wake_us - now_us()) > 0)
				pg_usleep(Min(wait_us, 1000));
		}
		else if (wait_us < 0)
		{
			(void) WaitEventSetWait(wes, -1, &ev, 1, jf_wait_event(JF_WAIT_MAIN));
			ResetLatch(MyLatch);
		}
		CHECK_FOR_INTERRUPTS();
		consecutive_errors = 0;
	}
}

/*
 * Everything between connecting and the first turn.  Called again after an
 * ERROR here (see recover_from_error): each step may run twice.
 */
static WaitEventSet *
start_serving(JfWorkerState *ws)
{
	WaitEventSet *wes;

	starting = true;
	wait_for_extension(ws, false);
	jf_guard_serve();

	raise_fd_limit();
	if (ws->http == NULL)
		jf_dispatch_init(ws);
	/* before the queues are read: what a COMMIT PREPARED to come changes */
	if (jf_worker_part == 0)
	{
		jf_xact_begin("jobflow: adopting prepared transactions");
		jf_prepared_adopt();
		jf_xact_commit();
	}
	if (jf_queues_refresh(ws, true))
		jf_prune_reset_mark(ws->prune);
	jf_fault("startup");
	/* held by jobflow.dispatch: running tasks wait for the release too */
	if (jf_guard_hold(jf_now_ms()) == JF_HOLD_NONE)
	{
		jf_feed_rescue_running(ws, NULL, 0, NULL);
		jf_feed_housekeeping(ws, jf_now_ms());
	}
	publish_stats(ws);
	ereport(LOG,
			(errmsg("jobflow worker started in database \"%s\" with %zu task(s) due within %d s",
					worker_dbname, jf_wheel_count(ws->wheel), jobflow_horizon_s)));

	wes = jf_create_wait_event_set(3);
	AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(wes, WL_SOCKET_READABLE, jf_http_fd(ws->http), NULL, NULL);
	starting = false;
	return wes;
}

/*
 * The longjmp target's work, as PostgreSQL's own launchers do it: forget
 * pending cancels and timeouts, report, abort the transaction, release
 * what an error outside a transaction can leave held, and go on with the
 * worker's memory intact.  The extension dropped under the worker is no
 * error (see serve_again).
 */
static void
recover_from_error(JfWorkerState *ws)
{
	bool		lost = jf_guard_take_lost();
	bool		lock_wait;

	error_context_stack = NULL;
	HOLD_INTERRUPTS();
	disable_all_timeouts(false);
	QueryCancelPending = false;
	if (!lost)
		EmitErrorReport();
	lock_wait = geterrcode() == ERRCODE_LOCK_NOT_AVAILABLE;
	AbortCurrentTransaction();
	LWLockReleaseAll();
	ConditionVariableCancelSleep();
	pgstat_report_wait_end();
	UnlockBuffers();
	MemoryContextSwitchTo(TopMemoryContext);
	FlushErrorState();
	MemoryContextReset(ws->turn_cxt);
	RESUME_INTERRUPTS();

	if (ws->fair != NULL)
		jf_dispatch_recover(ws);
	if (lost)
	{
		serve_again(ws);
		return;
	}
	/* drained wake-ups or forgotten wheel entries may be lost; strays left */
	ws->rescan_soon = true;
	ws->full_rescan_soon = true;
	if (!lock_wait)
		ws->strays_look_ms = 0;		/* at once */
	if (starting)
	{
		/* not serving yet: try again, calmly, for as long as it takes */
		consecutive_errors = Min(consecutive_errors + 1, MAX_CONSECUTIVE_ERRORS);
	}
	else if (!lock_wait && ++consecutive_errors > MAX_CONSECUTIVE_ERRORS)
		proc_exit(1);
	pg_usleep(100000L * consecutive_errors);
	/* a worker that cannot start (a lock it waits for) still stops */
	if (starting && got_sigterm)
		exit_worker();
}

void
jobflow_worker_main(Datum main_arg)
{
	static JfWorkerState ws;		/* static: must survive a longjmp */
	static WaitEventSet *wes = NULL;
	sigjmp_buf	local_sigjmp_buf;
	Oid			dboid;

	/*
	 * Until connected, SIGTERM ends the process at its next interrupt
	 * check (die), not inside the handler: the default bgworker_die reports
	 * from the signal handler, and a SIGTERM that lands while start-up
	 * reads the relcache init file deadlocks on stdio's lock (DROP
	 * DATABASE ... WITH (FORCE) of a database whose worker was starting
	 * then waited for ever).
	 */
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	jf_my_slot = jf_worker_attach(main_arg, &dboid);
	jf_worker_part = jf_my_slot->part;
	/*
	 * Not held until dispatch_paused() says otherwise: a predecessor that
	 * exited holding left its reason in the slot, which the launcher resets
	 * only when it gives the slot to another database.
	 */
	pg_atomic_write_u64(&jf_my_slot->held, (uint64) JF_HELD_NO);
	/* counters and histograms add up in the database's first slot */
	jf_figures = jf_db_slot(dboid);
	if (jf_figures == NULL)
		jf_figures = jf_my_slot;
	jf_metrics_attach(&jf_figures->metrics);
	before_shmem_exit(detach_shared, (Datum) 0);
	BackgroundWorkerUnblockSignals();

	/*
	 * The cluster's synchronous_commit, before the database's and the
	 * role's settings apply: a database owner's "off" would make the
	 * claims, which must be durable before requests go out, asynchronous.
	 */
	strlcpy(cluster_sync_commit, GetConfigOption("synchronous_commit", false, false),
			sizeof(cluster_sync_commit));
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	pqsignal(SIGTERM, handle_sigterm);
	jf_am_worker = true;

	/*
	 * What ALTER DATABASE or ALTER ROLE ... SET gave this session (a
	 * database's owner may set them) must not stop the worker: a default
	 * of read-only transactions, serializable ones, or a timeout of any
	 * kind would fail or end its transactions.  Its own values, before its
	 * first transaction.
	 */
	jf_pin_session_settings();
	/* timeouts set per database or role would make the worker exit */
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * Tenants cannot lock jobflow's tables against the worker (no grant
	 * allows it, and claims skip locked rows), but an admin's DDL queued
	 * behind a long transaction could still hold it up: waiting is bounded,
	 * and the turn is tried again, while requests in flight go on.
	 */
	SetConfigOption("lock_timeout", LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);

	StartTransactionCommand();
	strlcpy(worker_dbname, get_database_name(dboid), sizeof(worker_dbname));
	CommitTransactionCommand();
	pgstat_report_appname("jobflow worker");
	SetConfigOption("session_replication_role", "replica", PGC_SUSET, PGC_S_OVERRIDE);
	/* claims commit as the cluster's synchronous_commit says (xact.c) */
	jf_xact_init(cluster_sync_commit, jf_guard_check_incarnation);
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	/* a role's objects in public must never resolve in the superuser worker */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * The worker's statements are small and run thousands of times a
	 * second: compiling one costs more than it can ever save (a plan whose
	 * estimate crossed jit_above_cost once took 700 ms instead of 3 ms).
	 */
	SetConfigOption("jit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	pg_atomic_write_u64(&jf_my_slot->started_ms, (uint64) jf_now_ms());
	jf_settings_report_rules();

	memset(&ws, 0, sizeof(ws));
	ws.cxt = AllocSetContextCreate(TopMemoryContext, "jobflow worker",
								   ALLOCSET_DEFAULT_SIZES);
	ws.turn_cxt = AllocSetContextCreate(TopMemoryContext, "jobflow worker turn",
										ALLOCSET_DEFAULT_SIZES);
	jf_feed_init(&ws);
	ws.log = jf_log_writer_create();
	ws.prune = jf_prune_create(ws.cxt);
	ws.strays_look_ms = INT64_MAX;
	/* occurrences that fell due while the server was down are the missed ones */
	jf_cron_missed_before = PgStartTime;

	/* listen first: a task committed after this is either notified or scanned */
	jf_feed_listen();

	/*
	 * From here on an ERROR aborts the transaction and resumes where the
	 * worker was, as in the autovacuum launcher: the wheel, the requests in
	 * flight and the buffered outcomes are in this process's memory only,
	 * and exiting would turn every one of them into a re-sent, interrupted
	 * attempt.  An error while starting is retried, never a reason to exit
	 * (a restore in progress, say); repeated errors in the loop still exit.
	 * The table stays the truth either way.
	 */
	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
		recover_from_error(&ws);
	PG_exception_stack = &local_sigjmp_buf;

	if (wes == NULL)
		wes = start_serving(&ws);
	run_loop(&ws, wes);

	PG_exception_stack = NULL;
	shut_down(&ws, wes);
	exit_worker();
}
