/*-------------------------------------------------------------------------
 *
 * wake.h
 *	  Wake-ups published at commit into the slots of this database's
 *	  workers (wake.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_WAKE_H
#define JOBFLOW_WAKE_H

#include "launcher/slots.h"

#include "datatype/timestamp.h"

/* the due time before which new tasks must wake the worker */
extern TimestampTz jf_notify_before(void);

/* the id ranges of committed tasks; cron and queues: "look at them all" */
extern void jf_publish_wake(const int64 *lo, const int64 *hi, int n,
							bool cron, bool queues);

/*
 * The timers and queues a committed transaction changed, by key; "every"
 * (or more than fit) makes the worker read all of them.
 */
extern void jf_publish_changes(const int64 *timer_ids, int ntimers, bool every_timer,
							   const JfQueueKey *queues, int nqueues, bool every_queue);

#endif							/* JOBFLOW_WAKE_H */
