/*-------------------------------------------------------------------------
 *
 * prune.h
 *	  Retention: the worker's pruning of finished tasks (prune.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_PRUNE_H
#define JOBFLOW_PRUNE_H

#include "worker.h"

extern int64 jf_prune_deadline(void);
extern void jf_prune_turn(WorkerState *ws);
extern void jf_prune_reset_mark(void);

#endif							/* JOBFLOW_PRUNE_H */
