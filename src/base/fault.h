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
 * jobflow.test_doh_url (superuser only, not in SHOW ALL) makes the worker
 * resolve host names by DNS over HTTPS at that URL instead of the
 * system's resolver: a URL that answers nothing makes every name lookup
 * fail without any DNS server being asked (numeric hosts need no lookup).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_FAULT_H
#define JOBFLOW_FAULT_H

/* the settings, for tests only (superuser, not in SHOW ALL) */
extern char *jobflow_inject_error;
extern char *jobflow_test_doh_url;

/* the assign hook of jobflow.inject_error (settings.c defines it) */
extern void jf_fault_assign(const char *newval, void *extra);
extern void jf_fault(const char *point);

#endif							/* JOBFLOW_FAULT_H */
