/*-------------------------------------------------------------------------
 *
 * feed.h
 *	  Keeping the worker's wheel in step with jobflow.tasks (feed.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_FEED_H
#define JOBFLOW_FEED_H

#include "worker/state.h"

extern void jf_feed_init(JfWorkerState *ws);
extern void jf_feed_listen(void);
extern void jf_feed_forget_all(JfWorkerState *ws);
extern void jf_feed_rescue_running(JfWorkerState *ws, int64 *ids, int n,
								const char *why);
extern void jf_feed_process_notifications(JfWorkerState *ws);
extern bool jf_feed_take_wakeups(JfWorkerState *ws);
extern void jf_feed_housekeeping(JfWorkerState *ws, int64 now_ms);
extern void jf_feed_upsert(JfWorkerState *ws, int64 id, int64 due_ms, uint32 queue);
extern bool jf_feed_park(JfWorkerState *ws, int64 id, int64 due_ms);
extern bool jf_feed_take(uint64 id, uint32 queue, void *arg);
extern void jf_feed_recheck(JfWorkerState *ws, Datum ids, int64 now_ms);
extern uint64 jf_feed_map_memory(JfWorkerState *ws);

#endif							/* JOBFLOW_FEED_H */
