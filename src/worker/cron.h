/*-------------------------------------------------------------------------
 *
 * cron.h
 *	  What the worker tells its cron materialiser (cron.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_WORKER_CRON_H
#define JOBFLOW_WORKER_CRON_H

#include "postgres.h"

#include "datatype/timestamp.h"

/*
 * Occurrences due before this are "missed" and follow their timer's
 * policy (0: before now minus a grace).  The worker sets it to the
 * server's start, so that occurrences a worker restarted by errors did not
 * fire still fire, late, and to the time dispatching resumes after the
 * switch was off.
 */
extern TimestampTz jf_cron_missed_before;

/* the worker's next materialisations look at these timers only */
extern void jf_cron_only(const int64 *ids, int n);

#endif							/* JOBFLOW_WORKER_CRON_H */
