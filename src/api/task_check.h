/*-------------------------------------------------------------------------
 *
 * task_check.h
 *	  The request checks of task_check.c, shared with the cron timers'
 *	  row trigger (cron.c).
 *
 * A timer holds the same request columns as a task (url, method, headers,
 * body, content_type, timeout_ms, max_attempts, queue, owner), so both are
 * held to exactly the same rules by the same code.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_TASK_CHECK_H
#define JOBFLOW_TASK_CHECK_H

#include "access/htup.h"
#include "access/tupdesc.h"
#include "fmgr.h"

/*
 * Validate the request columns of a row (ereport on the first problem) and
 * fill repl/replace (arrays of desc->natts) with normalised values: method
 * in upper case, headers defaulting to {}, owner defaulting to the current
 * role on insert.  run_at and state are checked only if the row has them.
 */
extern void jf_check_request_row(HeapTuple tuple, TupleDesc desc,
									  bool is_insert, Datum *repl,
									  bool *repl_null, bool *replace);

/* Refuse (22023) a queue name that is NULL, empty, too long or unprintable. */
extern void jf_check_queue_name(text *name);

#endif							/* JOBFLOW_TASK_CHECK_H */
