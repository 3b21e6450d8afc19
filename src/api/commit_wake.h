/*-------------------------------------------------------------------------
 *
 * commit_wake.h
 *	  Wake-ups at commit of the tasks a transaction wrote (commit_wake.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_COMMIT_WAKE_H
#define JOBFLOW_COMMIT_WAKE_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* the row trigger of jobflow.tasks: a pending row this statement wrote */
extern void jf_announce_task(int64 id, TimestampTz run_at);

#endif							/* JOBFLOW_COMMIT_WAKE_H */
