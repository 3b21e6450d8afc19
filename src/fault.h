/*-------------------------------------------------------------------------
 *
 * fault.h
 *	  Errors injected at named points of the worker, for tests.
 *
 * jobflow.inject_error (superuser only, not in SHOW ALL) names a point;
 * the worker raises an ERROR the first time it passes that point after
 * the setting changed.  A name ending in '*' raises every time.  Points:
 * turn, before_claim, claim, after_claim, flush, after_flush, housekeeping,
 * load, startup.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_FAULT_H
#define JOBFLOW_FAULT_H

extern char *jobflow_inject_error;

extern void jf_fault_define_guc(void);
extern void jf_fault(const char *point);

#endif							/* JOBFLOW_FAULT_H */
