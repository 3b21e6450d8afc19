/*-------------------------------------------------------------------------
 *
 * commit_wake.c
 *	  Wake-ups at commit: the statement triggers of jobflow.tasks,
 *	  jobflow.cron_timers and jobflow.queues, and the commit callback that
 *	  hands what a transaction wrote to the database's workers.
 *
 * The row trigger of jobflow.tasks (task_check.c) announces each pending
 * row; the statement trigger keeps one announcement per statement until
 * commit; at commit the ranges of ids due before the workers' horizon are
 * published into their slots (launcher/wake.c), which sets their latches.
 * A task due later needs no wake-up: the rolling rescan loads it at least
 * one jobflow.reconcile_interval before it is due.  A transaction to be
 * prepared keeps its wake-ups under its GID until COMMIT PREPARED
 * (launcher/prepared.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "api/commit_wake.h"
#include "api/triggers.h"
#include "base/compat.h"
#include "launcher/prepared.h"
#include "launcher/wake.h"

/*
 * What the statement trigger announces: the ids and earliest due time of
 * the pending rows the current statement wrote.  The row trigger fills it,
 * so the statement trigger needs no transition table (which would copy
 * every row of a bulk INSERT into a tuplestore).  It belongs to one local
 * transaction; rows of a statement that failed inside a savepoint only
 * widen the next announcement, and loading filters by state anyway.
 */
static struct
{
	LocalTransactionId lxid;
	int64		min_id;
	int64		max_id;
	TimestampTz min_run_at;
	bool		any;
}			announce;

/* A pending row the current statement wrote (the row trigger of jobflow.tasks). */
void
jf_announce_task(int64 id, TimestampTz run_at)
{
	if (!announce.any || announce.lxid != JF_MY_LXID)
	{
		announce.lxid = JF_MY_LXID;
		announce.min_id = announce.max_id = id;
		announce.min_run_at = run_at;
		announce.any = true;
		return;
	}
	announce.min_id = Min(announce.min_id, id);
	announce.max_id = Max(announce.max_id, id);
	announce.min_run_at = Min(announce.min_run_at, run_at);
}

/*
 * One announcement per statement, kept until commit: whether it must wake
 * the worker is decided by the pre-commit callback, against the notify
 * window in force at commit rather than at the statement, so a transaction
 * that stays open for a while still wakes the worker when its tasks have
 * become due soon (or overdue) by the time they become visible.  The ranges
 * that must wake it go to the worker through shared memory once the commit
 * is visible (jf_publish_wake), not as NOTIFY payloads, which any role
 * could forge.
 */
typedef struct Announcement
{
	int64		min_id;
	int64		max_id;
	TimestampTz min_run_at;
} Announcement;

static Announcement *announcements = NULL;	/* in TopTransactionContext */
static int	nannouncements = 0;
static int	maxannouncements = 0;
static int64 *wake_lo = NULL;	/* decided at pre-commit, published at commit */
static int64 *wake_hi = NULL;
static int	nwake = 0;
static bool cron_changed = false;	/* a cron timer was written */
static bool queues_changed = false; /* jobflow.queues was written */
static bool callback_registered = false;
/* decided at pre-prepare, kept at prepare for COMMIT PREPARED (prepared.c) */
static bool prepare_keep = false;
static int64 prepare_lo;
static int64 prepare_hi;
static bool prepare_cron;
static bool prepare_queues;

static void
announce_at_commit(XactEvent event, void *arg)
{
	int			i;

	/*
	 * A transaction to be prepared: every id it wrote (due soon or not: by
	 * COMMIT PREPARED, later ones may be due soon too), as one range.
	 */
	if (event == XACT_EVENT_PRE_PREPARE)
	{
		prepare_keep = nannouncements > 0 || cron_changed || queues_changed;
		prepare_lo = PG_INT64_MAX;
		prepare_hi = PG_INT64_MIN;
		for (i = 0; i < nannouncements; i++)
		{
			prepare_lo = Min(prepare_lo, announcements[i].min_id);
			prepare_hi = Max(prepare_hi, announcements[i].max_id);
		}
		prepare_cron = cron_changed;
		prepare_queues = queues_changed;
	}
	if (event == XACT_EVENT_PREPARE && prepare_keep)
		jf_prepared_keep(prepare_lo, prepare_hi, prepare_cron, prepare_queues);
	if (event == XACT_EVENT_PREPARE || event == XACT_EVENT_ABORT)
		prepare_keep = false;

	if (event == XACT_EVENT_PRE_COMMIT && nannouncements > 0)
	{
		TimestampTz before = jf_notify_before();

		wake_lo = MemoryContextAlloc(TopTransactionContext, sizeof(int64) * nannouncements);
		wake_hi = MemoryContextAlloc(TopTransactionContext, sizeof(int64) * nannouncements);
		for (i = 0; i < nannouncements; i++)
		{
			if (announcements[i].min_run_at >= before)
				continue;
			wake_lo[nwake] = announcements[i].min_id;
			wake_hi[nwake] = announcements[i].max_id;
			nwake++;
		}
	}
	if (event == XACT_EVENT_COMMIT && (nwake > 0 || cron_changed || queues_changed))
		jf_publish_wake(wake_lo, wake_hi, nwake, cron_changed, queues_changed);
	if (event == XACT_EVENT_PRE_PREPARE || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
	{
		/* the arrays live in TopTransactionContext and go with it */
		announcements = NULL;
		nannouncements = 0;
		maxannouncements = 0;
		wake_lo = wake_hi = NULL;
		nwake = 0;
		cron_changed = false;
		queues_changed = false;
	}
}

static void
register_callback(void)
{
	if (!callback_registered)
	{
		RegisterXactCallback(announce_at_commit, NULL);
		callback_registered = true;
	}
}

/*
 * AFTER statement trigger of jobflow.cron_timers: at commit, the worker
 * materialises the changed timers' occurrences.
 */
PG_FUNCTION_INFO_V1(jobflow_cron_wake);
Datum
jobflow_cron_wake(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("jobflow._cron_notify() must be fired by a trigger after each statement")));
	register_callback();
	cron_changed = true;
	return PointerGetDatum(NULL);
}

/*
 * AFTER statement trigger of jobflow.queues: at commit, the worker reads
 * the queues' settings again.
 */
PG_FUNCTION_INFO_V1(jobflow_queues_wake);
Datum
jobflow_queues_wake(PG_FUNCTION_ARGS)
{
	jf_require_trigger(fcinfo, "jobflow._queues_notify", false, false, "queues");
	register_callback();
	queues_changed = true;
	return PointerGetDatum(NULL);
}

/*
 * AFTER statement trigger: remember the id range and earliest due time of
 * the pending tasks the statement wrote; at commit they become
 * NOTIFY jobflow '<min id> <max id>' if the worker needs to hear of them.
 * NOTIFY is delivered at commit only, so a rolled-back task never wakes
 * the worker.
 */
PG_FUNCTION_INFO_V1(jobflow_notify_worker);
Datum
jobflow_notify_worker(PG_FUNCTION_ARGS)
{
	jf_require_trigger(fcinfo, "jobflow._notify_worker", false, false, "tasks");

	if (announce.any && announce.lxid == JF_MY_LXID)
	{
		register_callback();
		/*
		 * Statements that write one row each (an INSTEAD OF trigger under
		 * COPY into jobflow.task_import, a loop of schedule() calls) make
		 * ranges that touch or overlap: keep one, not one wake-up per row.
		 */
		if (nannouncements > 0 &&
			announce.min_id <= announcements[nannouncements - 1].max_id + 1 &&
			announce.max_id >= announcements[nannouncements - 1].min_id - 1)
		{
			Announcement *last = &announcements[nannouncements - 1];

			last->min_id = Min(last->min_id, announce.min_id);
			last->max_id = Max(last->max_id, announce.max_id);
			last->min_run_at = Min(last->min_run_at, announce.min_run_at);
			announce.any = false;
			return PointerGetDatum(NULL);
		}
		if (nannouncements == maxannouncements)
		{
			maxannouncements = Max(8, maxannouncements * 2);
			announcements = announcements == NULL ?
				MemoryContextAlloc(TopTransactionContext,
								   sizeof(Announcement) * maxannouncements) :
				repalloc(announcements, sizeof(Announcement) * maxannouncements);
		}
		announcements[nannouncements].min_id = announce.min_id;
		announcements[nannouncements].max_id = announce.max_id;
		announcements[nannouncements].min_run_at = announce.min_run_at;
		nannouncements++;
	}
	announce.any = false;
	return PointerGetDatum(NULL);
}

