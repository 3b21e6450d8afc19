/*-------------------------------------------------------------------------
 *
 * changes.c
 *	  Which cron timers and configured queues a committed transaction
 *	  changed, handed to the worker by key.
 *
 * A commit that changes one timer or one queue is cheap for a tenant; what
 * it costs the worker must be in proportion.  So the row triggers of
 * jobflow.cron_timers (_cron_notify) and jobflow.queues (_queues_notify)
 * remember the timer ids and (owner, name) keys of the rows a statement
 * wrote, and the commit hands them to the worker through shared memory:
 * it materialises those timers by primary key, and reads those queues'
 * rows, nothing else.  A statement that changed no row fires no row
 * trigger and wakes nothing (resume_queue() of a queue that was not
 * paused, UPDATE ... WHERE false).  More changes than shared memory holds,
 * a TRUNCATE of jobflow.queues, or a prepared transaction (whose wake-up
 * keeps no keys, see prepared.c) make the worker read them all, as it did
 * before for every commit.
 *
 * Like the wake-ups of tasks (commit_wake.c), nothing here can be forged
 * by a role without grants: only a transaction that wrote the tables gets
 * to publish.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "api/triggers.h"
#include "launcher/prepared.h"
#include "launcher/slots.h"
#include "launcher/wake.h"

/* what this transaction changed, in TopTransactionContext */
static int64 *timer_ids = NULL;
static int	ntimers = 0;
static bool all_timers = false;
static JfQueueKey *queue_keys = NULL;
static int	nqueues = 0;
static bool all_queues = false;
static bool callback_registered = false;

static void
forget(void)
{
	timer_ids = NULL;
	ntimers = 0;
	all_timers = false;
	queue_keys = NULL;
	nqueues = 0;
	all_queues = false;
}

/*
 * Commit: the changes are visible, hand them over (nothing here may fail).
 * Prepare: COMMIT PREPARED, maybe in another session, has the worker read
 * them (prepared.c keeps them with the GID).  Abort: nothing happened.
 */
static void
changes_at_commit(XactEvent event, void *arg)
{
	bool		timers = ntimers > 0 || all_timers;
	bool		queues = nqueues > 0 || all_queues;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (timers || queues)
				jf_publish_changes(timer_ids, ntimers, all_timers,
								   queue_keys, nqueues, all_queues);
			forget();
			break;
		case XACT_EVENT_PREPARE:
			if (timers || queues)
				jf_prepared_keep_changes(timer_ids, ntimers, all_timers,
										 queue_keys, nqueues, all_queues);
			forget();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			forget();
			break;
		default:
			break;
	}
}

static void
register_callback(void)
{
	if (!callback_registered)
	{
		RegisterXactCallback(changes_at_commit, NULL);
		callback_registered = true;
	}
}

static void
remember_timer(int64 id)
{
	register_callback();
	if (all_timers)
		return;
	if (ntimers > 0 && timer_ids[ntimers - 1] == id)
		return;
	if (ntimers == JF_WAKE_TIMERS)
	{
		all_timers = true;
		return;
	}
	if (timer_ids == NULL)
		timer_ids = MemoryContextAlloc(TopTransactionContext, sizeof(int64) * JF_WAKE_TIMERS);
	timer_ids[ntimers++] = id;
}

static void
remember_queue(Oid owner, const char *name)
{
	JfQueueKey *k;
	int			i;

	register_callback();
	if (all_queues)
		return;
	for (i = 0; i < nqueues; i++)
		if (queue_keys[i].owner == owner && strcmp(queue_keys[i].name, name) == 0)
			return;
	/* a name that does not fit (none should): read every queue */
	if (nqueues == JF_WAKE_QUEUES || strlen(name) >= JF_QUEUE_NAME_SIZE)
	{
		all_queues = true;
		return;
	}
	if (queue_keys == NULL)
		queue_keys = MemoryContextAlloc(TopTransactionContext,
										sizeof(JfQueueKey) * JF_WAKE_QUEUES);
	k = &queue_keys[nqueues++];
	memset(k, 0, sizeof(JfQueueKey));
	k->dboid = MyDatabaseId;
	k->owner = owner;
	strlcpy(k->name, name, sizeof(k->name));
}

static Datum
column(HeapTuple tuple, TupleDesc desc, const char *name, bool *isnull)
{
	int			attnum = SPI_fnumber(desc, name);

	if (attnum <= 0)
		elog(ERROR, "jobflow's table has no column \"%s\"", name);
	return heap_getattr(tuple, attnum, desc, isnull);
}

/*
 * jobflow._cron_notify(): AFTER INSERT OR UPDATE ... FOR EACH ROW of
 * jobflow.cron_timers.  At commit, the worker materialises the occurrences
 * of the timers written.
 */
PG_FUNCTION_INFO_V1(jobflow_cron_rows_changed);
Datum
jobflow_cron_rows_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	bool		isnull;
	Datum		id;

	jf_require_trigger(fcinfo, "jobflow._cron_notify", false, true, "cron_timers");
	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	id = column(tuple, trigdata->tg_relation->rd_att, "id", &isnull);
	if (isnull)
		all_timers = true;
	else
		remember_timer(DatumGetInt64(id));
	register_callback();
	return PointerGetDatum(NULL);
}

static void
remember_queue_row(HeapTuple tuple, TupleDesc desc)
{
	bool		owner_null;
	bool		name_null;
	Datum		owner = column(tuple, desc, "owner", &owner_null);
	Datum		name = column(tuple, desc, "name", &name_null);

	if (owner_null || name_null)
		return;
	remember_queue(DatumGetObjectId(owner), TextDatumGetCString(name));
}

/*
 * jobflow._queues_notify(): AFTER INSERT OR UPDATE OR DELETE ... FOR EACH
 * ROW of jobflow.queues, and AFTER TRUNCATE ... FOR EACH STATEMENT.  At
 * commit, the worker reads the rows of the queues written (both keys of
 * an UPDATE that moved a row to another owner or name), or every row
 * after a TRUNCATE.
 */
PG_FUNCTION_INFO_V1(jobflow_queues_rows_changed);
Datum
jobflow_queues_rows_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;

	if (CALLED_AS_TRIGGER(fcinfo) && TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event))
	{
		jf_require_trigger(fcinfo, "jobflow._queues_notify", false, false, "queues");
		if (!TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
			ereport(ERROR,
					(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
					 errmsg("function \"%s\" must be fired for each row, or after TRUNCATE",
							"jobflow._queues_notify")));
		register_callback();
		all_queues = true;
		return PointerGetDatum(NULL);
	}
	jf_require_trigger(fcinfo, "jobflow._queues_notify", false, true, "queues");
	desc = trigdata->tg_relation->rd_att;
	if (!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		remember_queue_row(trigdata->tg_trigtuple, desc);
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		remember_queue_row(trigdata->tg_newtuple, desc);
	else if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		remember_queue_row(trigdata->tg_trigtuple, desc);
	return PointerGetDatum(NULL);
}
