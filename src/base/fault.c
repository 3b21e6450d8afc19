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

#include "utils/guc.h"

#include "base/fault.h"

char	   *jobflow_inject_error = NULL;
char	   *jobflow_test_doh_url = NULL;

/* the point already raised at, since the setting last changed */
static bool fired = false;

static void
assign_inject_error(const char *newval, void *extra)
{
	fired = false;
}

void
jf_fault_define_guc(void)
{
	DefineCustomStringVariable("jobflow.inject_error",
							   "Raises an ERROR in the worker at the named point, for tests.",
							   "Once per change of the setting; a name ending in * raises every time.",
							   &jobflow_inject_error, "",
							   PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							   NULL, assign_inject_error, NULL);
	DefineCustomStringVariable("jobflow.test_doh_url",
							   "Resolves the worker's host names by DNS over HTTPS at this URL, for tests.",
							   "Empty: the system's resolver.",
							   &jobflow_test_doh_url, "",
							   PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);
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
