/*-------------------------------------------------------------------------
 *
 * slots.c
 *	  The launcher's shared memory: the per-database slots, the requests
 *	  posted to the launcher and the holds on databases; how a backend
 *	  finds its database's slots, and how a worker takes and leaves its own.
 *
 * Locking: one spinlock (JfLauncherShared.mutex) protects the requests,
 * the holds and the assignment fields of every slot (dboid, incarnation,
 * registered, requested) and, nested inside it, a slot's own mutex for
 * its worker's pid.  Other backends find their database's slot without
 * the lock (jf_db_slot): what they read there is advisory, and a slot
 * reassigned under them is recognised by its dboid where it matters.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "launcher/slots.h"
#include "launcher/internal.h"

static void slot_init(JfSlot *s);

JfLauncherShared *jf_ls = NULL;

/* the worker's slot; NULL elsewhere (readers use jf_db_slot) */
JfSlot	   *jf_my_slot = NULL;
JfSlot	   *jf_figures = NULL;
int			jf_worker_part = 0;
bool		jf_am_worker = false;

/* the worker's own slot */
static int	my_slot = -1;
static JfWorkerExtra my_extra;

/* Slots in all: one per worker, jobflow.workers_per_database per database. */
int
jf_slots_count(void)
{
	return jobflow_max_databases * jobflow_workers_per_database;
}

Size
jf_slots_shmem_size(void)
{
	return add_size(offsetof(JfLauncherShared, slots),
					mul_size(sizeof(JfSlot), jf_slots_count()));
}

/* In the postmaster's shmem startup hook, AddinShmemInitLock held. */
void
jf_slots_shmem_init(void)
{
	bool		found;
	int			i;

	jf_ls = ShmemInitStruct("jobflow launcher", jf_slots_shmem_size(), &found);
	if (found)
		return;
	memset(jf_ls, 0, offsetof(JfLauncherShared, slots));
	SpinLockInit(&jf_ls->mutex);
	/* unlike any incarnation a worker registered before a crash carries */
	jf_ls->next_incarnation = (uint32) (GetCurrentTimestamp() / 1000);
	for (i = 0; i < jf_slots_count(); i++)
		slot_init(&jf_ls->slots[i]);
}

/*
 * The slots of a database's workers, by part, in one pass (NULL where a
 * part has none); returns how many were found.
 */
int
jf_db_slots(Oid dboid, JfSlot **by_part)
{
	int			i;
	int			n = 0;

	for (i = 0; i < jobflow_workers_per_database; i++)
		by_part[i] = NULL;
	if (jf_ls == NULL || !OidIsValid(dboid))
		return 0;
	for (i = 0; i < jf_slots_count() && n < jobflow_workers_per_database; i++)
	{
		JfSlot	   *s = &jf_ls->slots[i];
		int			part = s->part;

		if (s->dboid == dboid && part >= 0 && part < jobflow_workers_per_database &&
			by_part[part] == NULL)
		{
			by_part[part] = s;
			n++;
		}
	}
	return n;
}

/*
 * The slot serving a database (its first worker's: the figures), or NULL.
 * Read without the lock: callers take the slot's own mutex for what must
 * be exact.
 */
JfSlot *
jf_db_slot(Oid dboid)
{
	int			i;

	if (jf_ls == NULL || !OidIsValid(dboid))
		return NULL;
	for (i = 0; i < jf_slots_count(); i++)
		if (jf_ls->slots[i].dboid == dboid && jf_ls->slots[i].part == 0)
			return &jf_ls->slots[i];
	return NULL;
}

/* Set the latch of a slot's worker, if one is attached for dboid. */
void
jf_slot_wake(JfSlot *s, Oid dboid)
{
	Latch	   *latch;

	SpinLockAcquire(&s->mutex);
	latch = s->dboid == dboid ? s->worker_latch : NULL;
	SpinLockRelease(&s->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Wake every worker of a database; with recheck, to look at its extension
 * first (DROP EXTENSION committed).  Nothing here can fail.
 */
void
jf_db_wake(Oid dboid, bool recheck)
{
	JfSlot	   *slots[JF_MAX_WORKERS_PER_DB];
	int			part;

	(void) jf_db_slots(dboid, slots);
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		if (slots[part] == NULL)
			continue;
		if (recheck)
			pg_atomic_write_u32(&slots[part]->recheck, 1);
		jf_slot_wake(slots[part], dboid);
	}
}

/* jf_ls->mutex held */
bool
jf_launcher_is_held(Oid dboid)
{
	int			i;

	for (i = 0; i < MAX_HOLDS; i++)
		if (jf_ls->holds[i].pid != 0 && jf_ls->holds[i].dboid == dboid)
			return true;
	return false;
}

/* jf_ls->mutex held: the index of a database's first slot, or -1 */
int
jf_launcher_slot_index(Oid dboid)
{
	int			i;

	for (i = 0; i < jf_slots_count(); i++)
		if (jf_ls->slots[i].dboid == dboid && jf_ls->slots[i].part == 0)
			return i;
	return -1;
}

/*
 * Hand the launcher a request and wake it.  Cannot fail (it runs at
 * commit): a full queue makes the launcher probe every database.
 */
void
jf_launcher_post(Oid dboid, JfLaunchKind kind)
{
	Latch	   *latch;

	if (jf_ls == NULL || !OidIsValid(dboid))
		return;
	SpinLockAcquire(&jf_ls->mutex);
	if (jf_ls->nrequests < MAX_REQUESTS)
	{
		jf_ls->requests[jf_ls->nrequests].dboid = dboid;
		jf_ls->requests[jf_ls->nrequests].kind = kind;
		jf_ls->nrequests++;
	}
	else
		jf_ls->overflowed = true;
	latch = jf_ls->launcher_latch;
	SpinLockRelease(&jf_ls->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/* ----------------------------------------------------------------------
 * The worker's side
 * ---------------------------------------------------------------------- */

/*
 * Before connecting: take the slot the launcher registered this worker
 * for, or exit for good (code 0) if it is no longer wanted: the slot went
 * to another database, its database is held, or another worker has it (a
 * registration that survived a crash restart).  Publishing the pid under
 * the lock that holds are taken under makes a hold see this worker, or
 * this worker see the hold.
 */
JfSlot *
jf_worker_attach(Datum main_arg, Oid *dboid)
{
	int			i = DatumGetInt32(main_arg);
	JfSlot	   *s;
	bool		ours;

	memcpy(&my_extra, MyBgworkerEntry->bgw_extra, sizeof(my_extra));
	if (i < 0 || i >= jf_slots_count())
		proc_exit(0);
	s = &jf_ls->slots[i];
	SpinLockAcquire(&jf_ls->mutex);
	ours = s->dboid == my_extra.dboid && s->incarnation == my_extra.incarnation;
	SpinLockAcquire(&s->mutex);
	if (ours && s->worker_pid == 0 && !jf_launcher_is_held(my_extra.dboid))
	{
		s->worker_pid = MyProcPid;
		s->worker_latch = MyLatch;
		SpinLockRelease(&s->mutex);
		SpinLockRelease(&jf_ls->mutex);
		my_slot = i;
		*dboid = my_extra.dboid;
		return s;
	}
	if (ours && s->worker_pid == 0)
		s->registered = false;	/* held: the hold's end registers anew */
	SpinLockRelease(&s->mutex);
	SpinLockRelease(&jf_ls->mutex);
	proc_exit(0);
	return NULL;				/* keep compiler quiet */
}

/* jf_ls->mutex held: whether the slot is still the one this worker took */
static bool
still_ours(JfSlot *s)
{
	return s->dboid == my_extra.dboid && s->incarnation == my_extra.incarnation;
}

/* At exit (before_shmem_exit): unpublish the pid, if the slot has it. */
void
jf_worker_detach(void)
{
	JfSlot	   *s;
	bool		was = false;

	if (my_slot < 0)
		return;
	s = &jf_ls->slots[my_slot];
	SpinLockAcquire(&jf_ls->mutex);
	SpinLockAcquire(&s->mutex);
	if (s->worker_pid == MyProcPid)
	{
		s->worker_pid = 0;
		s->worker_latch = NULL;
		was = true;
	}
	SpinLockRelease(&s->mutex);
	SpinLockRelease(&jf_ls->mutex);
	if (!was)
		return;
	pg_atomic_write_u64(&s->horizon_end_ms, 0);
	pg_atomic_write_u64(&s->notify_before_ms, 0);
	pg_atomic_write_u64(&s->wheel_tasks, 0);
	pg_atomic_write_u64(&s->wheel_bytes, 0);
	pg_atomic_write_u64(&s->in_flight, 0);
	pg_atomic_write_u64(&s->queued, 0);
	pg_atomic_write_u64(&s->buffered_rows, 0);
}

/*
 * Before each look for the extension: CREATE EXTENSION committing after
 * this sets the flag again (its request is posted after its commit is
 * visible), so jf_worker_release() cannot miss it.
 */
void
jf_worker_clear_requested(void)
{
	JfSlot	   *s = &jf_ls->slots[my_slot];

	SpinLockAcquire(&jf_ls->mutex);
	if (still_ours(s))
		s->requested = false;
	SpinLockRelease(&jf_ls->mutex);
}

/*
 * The extension is absent: free the slot, unless CREATE EXTENSION asked
 * for this database since the look (false: look again).  True: the caller
 * exits with code 0.
 */
bool
jf_worker_release(void)
{
	JfSlot	   *s = &jf_ls->slots[my_slot];
	Latch	   *latch;

	SpinLockAcquire(&jf_ls->mutex);
	if (still_ours(s))
	{
		if (s->requested)
		{
			SpinLockRelease(&jf_ls->mutex);
			return false;
		}
		s->dboid = InvalidOid;
		s->registered = false;
		jf_ls->freed++;
	}
	SpinLockAcquire(&s->mutex);
	if (s->worker_pid == MyProcPid)
	{
		s->worker_pid = 0;
		s->worker_latch = NULL;
	}
	SpinLockRelease(&s->mutex);
	latch = jf_ls->launcher_latch;
	SpinLockRelease(&jf_ls->mutex);
	if (latch != NULL)
		SetLatch(latch);
	return true;
}

/*
 * How a stopping worker exits: 1 (the postmaster starts it again) unless
 * its database is held or its slot went elsewhere, then 0 (for good; the
 * hold's end has the launcher register a worker again).
 */
int
jf_worker_exit_code(void)
{
	JfSlot	   *s;
	int			code = 1;

	if (my_slot < 0)
		return 0;
	s = &jf_ls->slots[my_slot];
	SpinLockAcquire(&jf_ls->mutex);
	if (!still_ours(s))
		code = 0;
	else if (jf_launcher_is_held(my_extra.dboid))
	{
		s->registered = false;
		code = 0;
	}
	SpinLockRelease(&jf_ls->mutex);
	return code;
}

/* DROP EXTENSION committed in this database: look at the extension now. */
bool
jf_worker_recheck_pending(void)
{
	return my_slot >= 0 &&
		pg_atomic_exchange_u32(&jf_ls->slots[my_slot].recheck, 0) != 0;
}


/* A free slot, with its locks and atomics set up. */
static void
slot_init(JfSlot *s)
{
	pg_atomic_uint64 *c;

	memset(s, 0, sizeof(JfSlot));
	pg_atomic_init_u32(&s->recheck, 0);
	SpinLockInit(&s->mutex);
	SpinLockInit(&s->wake_mutex);
	pg_atomic_init_u64(&s->wake_ranges, 0);
	pg_atomic_init_u64(&s->wake_timers, 0);
	for (c = &s->horizon_end_ms; c <= &s->last_turn_ms; c++)
		pg_atomic_init_u64(c, 0);
	jf_metrics_shmem_init(&s->metrics);
}

/*
 * A slot's figures start from zero for each database it serves: called by
 * the launcher, under its lock, before it gives the slot to a database
 * (so that none of the database's workers writes them yet; readers of the
 * database that served it before may look meanwhile).  Stores only: no
 * lock is taken but the slot's wake_mutex, never held while taking the
 * launcher's.
 */
void
jf_slot_reset(JfSlot *s)
{
	pg_atomic_uint64 *c;

	SpinLockAcquire(&s->wake_mutex);
	s->nwake = 0;
	s->wake_overflowed = false;
	s->wake_cron = false;
	SpinLockRelease(&s->wake_mutex);
	pg_atomic_write_u64(&s->wake_ranges, 0);
	pg_atomic_write_u64(&s->wake_timers, 0);
	for (c = &s->horizon_end_ms; c <= &s->last_turn_ms; c++)
		pg_atomic_write_u64(c, 0);
	jf_metrics_reset(&s->metrics);
	/* resets asked of the database the slot served before (a store) */
	s->ncircuit_resets = 0;
}

/* what worker_status() and the metrics call each JfHeldReason */
const char *const jf_held_names[JF_HELD_REASONS] = {
	NULL, "dispatch off", "subscription", "restore", "sequence", "update"
};

/*
 * A gauge (the pg_atomic_uint64 at offset in the slot) over all workers of
 * this database: each publishes its own in its slot.
 */
uint64
jf_gauge_sum(size_t offset)
{
	uint64		sum = 0;
	int			part;
	JfSlot	   *slots[JF_MAX_WORKERS_PER_DB];

	(void) jf_db_slots(MyDatabaseId, slots);
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JfSlot	   *s = slots[part];

		if (s != NULL)
			sum += pg_atomic_read_u64((pg_atomic_uint64 *) ((char *) s + offset));
	}
	return sum;
}

/* How many of this database's workers are attached to their slots. */
int
jf_workers_up(void)
{
	int			up = 0;
	int			part;
	JfSlot	   *slots[JF_MAX_WORKERS_PER_DB];

	(void) jf_db_slots(MyDatabaseId, slots);
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JfSlot	   *s = slots[part];

		if (s == NULL)
			continue;
		SpinLockAcquire(&s->mutex);
		up += s->dboid == MyDatabaseId && s->worker_pid != 0 ? 1 : 0;
		SpinLockRelease(&s->mutex);
	}
	return up;
}

/*
 * Why a database may have no worker, for jobflow.explain(): how many
 * databases have slots (jobflow.max_databases at most), and whether the
 * launcher runs.  Advisory, like every reader's look at the slots.
 */
int
jf_databases_served(bool *launcher_up)
{
	int			n = 0;
	int			i;

	*launcher_up = false;
	if (jf_ls == NULL)
		return 0;
	SpinLockAcquire(&jf_ls->mutex);
	*launcher_up = jf_ls->launcher_pid != 0;
	for (i = 0; i < jf_slots_count(); i++)
		if (OidIsValid(jf_ls->slots[i].dboid) && jf_ls->slots[i].part == 0)
			n++;
	SpinLockRelease(&jf_ls->mutex);
	return n;
}

/*
 * The slot of this database for readers: a zeroed one, local to this
 * process, when no worker serves it (the figures of "no worker").
 */
JfSlot *
jf_reader_slot(void)
{
	static JfSlot *empty = NULL;
	JfSlot	   *s = jf_db_slot(MyDatabaseId);

	if (s != NULL)
		return s;
	if (empty == NULL)
	{
		empty = MemoryContextAlloc(TopMemoryContext, sizeof(JfSlot));
		slot_init(empty);
	}
	return empty;
}
