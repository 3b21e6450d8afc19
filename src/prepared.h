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

#include "jobflow.h"

#include "nodes/nodes.h"

/* ProcessUtility, before and after the statement runs (guard.c calls). */
extern void jf_prepared_utility_before(Node *parsetree);
extern void jf_prepared_utility_after(Node *parsetree);

/*
 * At XACT_EVENT_PREPARE (task_check.c): the ids this transaction wrote
 * (lo > hi: none) and whether it wrote timers or queues.  Never errors.
 */
extern void jf_prepared_keep(int64 lo, int64 hi, bool cron, bool queues);

#endif							/* JOBFLOW_PREPARED_H */
