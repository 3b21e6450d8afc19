/*-------------------------------------------------------------------------
 *
 * wake.c
 *	  Wake-ups into the slots of the database's workers: the ids of the
 *	  tasks, and the keys of the timers and queues, that a committed
 *	  transaction wrote, and the due time before which new tasks must be
 *	  announced at all.
 *
 * Backends call these from their commit callbacks (api/commit_wake.c,
 * api/changes.c) and from COMMIT PREPARED (prepared.c).  Only a backend
 * that wrote tasks, timers or queues can put anything here, so, unlike a
 * NOTIFY payload, nothing here can be forged by a role without grants.
 * What does not fit never fails: it only says "rescan" or "all of them".
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "launcher/wake.h"
#include "launcher/slots.h"

/*
 * Hand the worker what a committed transaction needs it to load, and wake
 * it.  Runs in the commit callback, after the commit is visible: nothing
 * here may fail, so a full ring only says "rescan".
 */
void
jf_publish_wake(const int64 *lo, const int64 *hi, int n, bool cron,
					 bool queues)
{
	int			i;
	int			part;
	JfSlot	   *slots[JF_MAX_WORKERS_PER_DB];

	/* no worker serves this database: the one to come scans the table */
	if (jf_db_slots(MyDatabaseId, slots) == 0)
		return;
	/* every worker of the database looks at every range: ids interleave */
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JfSlot	   *s = slots[part];

		if (s == NULL)
			continue;
		SpinLockAcquire(&s->wake_mutex);
		for (i = 0; i < n; i++)
		{
			JfWakeRange *r;

			if (s->nwake >= JF_WAKE_RING)
			{
				s->wake_overflowed = true;
				break;
			}
			r = &s->wake[s->nwake++];
			r->dboid = MyDatabaseId;
			r->lo = lo[i];
			r->hi = hi[i];
		}
		if (cron)
			s->wake_cron = true;
		SpinLockRelease(&s->wake_mutex);
		if (queues)
			pg_atomic_fetch_add_u64(&s->queues_version, 1);
		jf_slot_wake(s, MyDatabaseId);
	}
	if (slots[0] != NULL)
	{
		pg_atomic_fetch_add_u64(&slots[0]->wake_ranges, n);
		if (cron)
			pg_atomic_fetch_add_u64(&slots[0]->wake_timers, 1);
	}
}

/*
 * Due time the notify trigger compares new tasks against: a task due later
 * need not wake the worker, whose rolling rescan loads it at least one
 * jobflow.reconcile_interval before it is due.  Sparing those transactions
 * NOTIFY spares them its cluster-wide lock, held through the commit's WAL
 * flush.  With no worker attached every pending task is announced.
 */
TimestampTz
jf_notify_before(void)
{
	uint64		end_ms = PG_UINT64_MAX;
	TimestampTz result;
	int			part;
	JfSlot	   *slots[JF_MAX_WORKERS_PER_DB];

	(void) jf_db_slots(MyDatabaseId, slots);
	/* the earliest of the workers' windows; all of them if one is missing */
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JfSlot	   *s = slots[part];
		pid_t		pid = 0;

		if (s != NULL)
		{
			SpinLockAcquire(&s->mutex);
			pid = s->dboid == MyDatabaseId ? s->worker_pid : 0;
			SpinLockRelease(&s->mutex);
		}
		if (pid == 0)
			end_ms = 0;
		else
			end_ms = Min(end_ms, pg_atomic_read_u64(&s->notify_before_ms));
	}
	if (end_ms == 0)
	{
		TIMESTAMP_NOEND(result);
		return result;
	}
	return (TimestampTz) ((int64) end_ms * 1000 -
						  (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
}

/*
 * Hand what a committed transaction changed to the workers of its
 * database, and wake them.  Timers go to the first worker only (it runs
 * them all); queues to every one (each applies their limits to its share).
 * Runs in the commit callback, after the commit is visible: nothing here
 * may fail, so what does not fit only says "all of them".
 */
void
jf_publish_changes(const int64 *timers, int nt, bool every_timer,
				   const JfQueueKey *queues, int nq, bool every_queue)
{
	JfSlot	   *slots[JF_MAX_WORKERS_PER_DB];
	int			part;
	int			i;

	/* no worker serves this database: the one to come reads everything */
	if (jf_db_slots(MyDatabaseId, slots) == 0)
		return;
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JfSlot	   *s = slots[part];
		bool		queues_all = every_queue;

		if (s == NULL)
			continue;
		SpinLockAcquire(&s->wake_mutex);
		if (part == 0 && (nt > 0 || every_timer))
		{
			if (every_timer || s->ntimer_wakes + nt > JF_WAKE_TIMERS)
				s->wake_cron = true;
			else
				for (i = 0; i < nt; i++)
				{
					s->timer_wakes[s->ntimer_wakes].dboid = MyDatabaseId;
					s->timer_wakes[s->ntimer_wakes].id = timers[i];
					s->ntimer_wakes++;
				}
		}
		if (!queues_all && nq > 0)
		{
			if (s->nqueue_wakes + nq > JF_WAKE_QUEUES)
				queues_all = true;
			else
				for (i = 0; i < nq; i++)
					s->queue_wakes[s->nqueue_wakes++] = queues[i];
		}
		SpinLockRelease(&s->wake_mutex);
		if (queues_all)
			pg_atomic_fetch_add_u64(&s->queues_version, 1);
		jf_slot_wake(s, MyDatabaseId);
	}
	if (slots[0] != NULL && (nt > 0 || every_timer))
		pg_atomic_fetch_add_u64(&slots[0]->wake_timers, 1);
}
