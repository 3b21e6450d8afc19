/*-------------------------------------------------------------------------
 *
 * xact.h
 *	  The worker's transactions and its statement counter: the bottom
 *	  layer that the feeder, dispatcher, log writer, pruner and guard share,
 *	  so that none of them calls back into the worker loop above them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_XACT_H
#define JOBFLOW_XACT_H

typedef void (*JfXactCheck) (void);

extern void jf_xact_init(const char *durable_commit, JfXactCheck check);
extern void jf_xact_begin(const char *activity);
extern void jf_xact_begin_durable(const char *activity);
extern void jf_xact_by_id_only(void);
extern void jf_xact_commit(void);
extern void jf_xact_count_statements(int n);

#endif							/* JOBFLOW_XACT_H */
