/*-------------------------------------------------------------------------
 *
 * dispatch.h
 *	  From due tasks to requests and from results to outcomes (dispatch.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_DISPATCH_H
#define JOBFLOW_DISPATCH_H

#include "worker/state.h"

typedef struct JfDispatch JfDispatch;

extern void jf_dispatch_init(JfWorkerState *ws);
extern void jf_dispatch_reconfigure(JfWorkerState *ws);
extern bool jf_dispatch_due(JfWorkerState *ws, int64 now_ms);
extern bool jf_dispatch_room_freed(JfWorkerState *ws);
extern void jf_dispatch_outcomes_written(JfWorkerState *ws);
extern void jf_dispatch_collect(JfWorkerState *ws);
extern void jf_dispatch_notify_circuits(JfWorkerState *ws);
extern void jf_dispatch_reset_circuits(JfWorkerState *ws, Oid owner, const char *origin);
extern void jf_dispatch_abandon(JfWorkerState *ws);
extern void jf_dispatch_recover(JfWorkerState *ws);
extern void jf_dispatch_rescue_strays(JfWorkerState *ws);
extern int64 jf_dispatch_deadline(JfWorkerState *ws);

#endif							/* JOBFLOW_DISPATCH_H */
