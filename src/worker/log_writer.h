/*-------------------------------------------------------------------------
 *
 * log_writer.h
 *	  Outcomes of attempts, buffered and written in batches (log_writer.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_LOG_WRITER_H
#define JOBFLOW_LOG_WRITER_H

#include "worker/state.h"

typedef enum JfTaskOutcome
{
	OUTCOME_SUCCEEDED,
	OUTCOME_RETRY,
	OUTCOME_FAILED,
	OUTCOME_INTERRUPTED,		/* the worker stopped during the attempt */
	OUTCOME_UNSENT				/* the worker stopped before sending: the
								 * claim is undone, nothing is logged */
} JfTaskOutcome;

typedef struct JfOutcomeRow
{
	int64		id;
	int32		attempt;
	Oid			owner;
	JfTaskOutcome outcome;
	const char *state;			/* new task state */
	TimestampTz scheduled_at;
	TimestampTz started_at;		/* unset from OUTCOME_INTERRUPTED on */
	TimestampTz finished_at;
	TimestampTz next_run_at;	/* set for OUTCOME_RETRY only */
	int			http_status;	/* 0 = none */
	const char *error;			/* NULL = none */
	const char *response;		/* NULL = none; need not be valid text */
	size_t		response_len;
	bool		unlogged;		/* OUTCOME_SUCCEEDED only: the task is
								 * updated, no jobflow.task_log row is
								 * written (jobflow.log_attempts) */
} JfOutcomeRow;

typedef struct JfLogWriter JfLogWriter;

extern JfLogWriter *jf_log_writer_create(void);
extern void jf_log_writer_add(JfLogWriter *lw, const JfOutcomeRow *row);
extern int	jf_log_writer_buffered(JfLogWriter *lw);
extern bool jf_log_writer_has_retry(JfLogWriter *lw, int64 id);
extern bool jf_log_writer_holds(JfLogWriter *lw, int64 id);
extern int	jf_log_writer_orphans(JfLogWriter *lw, int64 **ids);
extern void jf_log_writer_forget_orphans(JfLogWriter *lw, int n);
extern int64 jf_log_writer_deadline(JfLogWriter *lw);
extern void jf_log_writer_flush(JfLogWriter *lw);
extern void jf_log_writer_discard(JfLogWriter *lw);

#endif							/* JOBFLOW_LOG_WRITER_H */
