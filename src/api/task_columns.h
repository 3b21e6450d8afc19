/*-------------------------------------------------------------------------
 *
 * task_columns.h
 *	  Where the columns of a task (or of a cron timer, which holds the same
 *	  request columns) are, for the row trigger of jobflow.tasks
 *	  (task_check.c) and the state machine (task_state.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_TASK_COLUMNS_H
#define JOBFLOW_TASK_COLUMNS_H

/* Column numbers of jobflow.tasks (or of a row with the same columns). */
typedef struct JfTaskColumns
{
	int			id;
	int			url;
	int			method;
	int			headers;
	int			body;
	int			body_bytes;		/* 0 when the table has none (0.1.0, timers) */
	int			content_type;
	int			run_at;
	int			state;
	int			max_attempts;
	int			timeout_ms;
	int			queue;
	int			owner;
	int			updated_at;
	int			attempts;		/* tasks only */
	int			attempts_base;	/* tasks only; 0 under a 0.1.0 schema */
	int			active;			/* timers only; 0 for tasks */
	int			flow_key;		/* tasks only; 0 before 0.3.0 */
	int			flow_at;		/* tasks only; 0 before 0.3.0 */
} JfTaskColumns;

#endif							/* JOBFLOW_TASK_COLUMNS_H */
