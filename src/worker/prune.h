/*-------------------------------------------------------------------------
 *
 * prune.h
 *	  Retention: the worker's pruning of finished tasks (prune.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_PRUNE_H
#define JOBFLOW_PRUNE_H

#include "worker/state.h"

typedef struct JfPrune JfPrune;

extern JfPrune *jf_prune_create(MemoryContext cxt);
extern int64 jf_prune_deadline(JfWorkerState *ws);
extern void jf_prune_turn(JfWorkerState *ws);
extern void jf_prune_reset_mark(JfPrune *p);

#endif							/* JOBFLOW_PRUNE_H */
