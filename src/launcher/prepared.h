/*-------------------------------------------------------------------------
 *
 * prepared.h
 *	  Wake-ups of prepared transactions: kept at PREPARE TRANSACTION,
 *	  published at COMMIT PREPARED (prepared.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_PREPARED_H
#define JOBFLOW_PREPARED_H

#include "postgres.h"

#include "base/settings.h"
#include "launcher/slots.h"

#include "nodes/nodes.h"

/* ProcessUtility, before and after the statement runs (jobflow.c calls). */
extern void jf_prepared_utility_before(Node *parsetree);
extern void jf_prepared_utility_after(Node *parsetree);

/*
 * At XACT_EVENT_PREPARE (api/commit_wake.c): the ids this transaction wrote
 * (lo > hi: none) and whether it wrote timers or queues.  Never errors.
 */
extern void jf_prepared_keep(int64 lo, int64 hi, bool cron, bool queues);

/*
 * At XACT_EVENT_PREPARE (api/changes.c): the timers and queues it changed
 * (all_*: too many to name).  Never errors.
 */
extern void jf_prepared_keep_changes(const int64 *timers, int nt, bool all_timers,
									 const JfQueueKey *queues, int nq, bool all_queues);

/*
 * In the worker, as it starts serving, in a transaction: the transactions
 * prepared before it (or before a restart of the server, which emptied
 * the slot) are kept as having changed every timer and queue.
 */
extern void jf_prepared_adopt(void);

#endif							/* JOBFLOW_PREPARED_H */
