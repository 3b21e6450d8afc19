/*-------------------------------------------------------------------------
 *
 * queues.h
 *	  Queues as objects: the worker's copy of jobflow.queues (queues.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_QUEUES_H
#define JOBFLOW_QUEUES_H

#include "worker/state.h"

/*
 * Read jobflow.queues into the fair share if it changed (or force); true
 * when retentions are set or were: the pruner starts its mark over.
 */
extern bool jf_queues_refresh(JfWorkerState *ws, bool force);

/* Whether a queue has a retention of its own; *positive: one that prunes. */
extern bool jf_queues_retention_overrides(JfWorkerState *ws, bool *positive);

/*
 * Whether a success at a task's first attempt, in lane, is written to
 * jobflow.task_log (jobflow.log_attempts, or the queue's own).
 */
extern bool jf_queues_log_first_success(JfWorkerState *ws, uint32 lane);

#endif							/* JOBFLOW_QUEUES_H */
