/*-------------------------------------------------------------------------
 *
 * task_state.h
 *	  The task state machine (task_state.c), for the row trigger of
 *	  jobflow.tasks.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_TASK_STATE_H
#define JOBFLOW_TASK_STATE_H

#include "postgres.h"

#include "access/htup.h"
#include "access/tupdesc.h"
#include "api/task_columns.h"

/* the name of a jobflow.task_state value */
extern const char *jf_task_state_name(Datum state);

/* refuse (ereport) a move the state machine forbids; true: a redrive */
extern bool jf_task_check_transition(HeapTuple oldtup, HeapTuple newtup,
									 TupleDesc desc, JfTaskColumns *cols);

/* a redriven task's fresh attempt budget, into repl/replace */
extern void jf_task_redrive(HeapTuple oldtup, TupleDesc desc, JfTaskColumns *cols,
							Datum *repl, bool *replace);

/* whether an update changes what the task sends */
extern bool jf_task_request_changed(HeapTuple oldtup, HeapTuple newtup,
									TupleDesc desc, JfTaskColumns *cols);

#endif							/* JOBFLOW_TASK_STATE_H */
