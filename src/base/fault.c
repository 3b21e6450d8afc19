/*-------------------------------------------------------------------------
 *
 * fault.c
 *	  Errors injected at named points of the worker (see fault.h), so that
 *	  tests can show that an ERROR at any step loses, repeats and strands
 *	  nothing.  A superuser setting rather than a build flag: the tests run
 *	  against the library users install.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "base/fault.h"

/* jobflow.inject_error and jobflow.test_doh_url (defined in settings.c) */
char	   *jobflow_inject_error = NULL;
char	   *jobflow_test_doh_url = NULL;

/* the point already raised at, since the setting last changed */
static bool fired = false;

/* The assign hook of jobflow.inject_error: a new point may fire again. */
void
jf_fault_assign(const char *newval, void *extra)
{
	fired = false;
}

/* Raise the injected error if point is the one named. */
void
jf_fault(const char *point)
{
	size_t		len;
	bool		always;

	if (jobflow_inject_error == NULL || jobflow_inject_error[0] == '\0')
		return;
	len = strlen(jobflow_inject_error);
	always = jobflow_inject_error[len - 1] == '*';
	if (always)
		len--;
	if (strlen(point) != len || strncmp(point, jobflow_inject_error, len) != 0)
		return;
	if (fired && !always)
		return;
	fired = true;
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("jobflow: error injected at \"%s\"", point),
			 errdetail("jobflow.inject_error is set.")));
}
