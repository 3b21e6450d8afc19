/*-------------------------------------------------------------------------
 *
 * compat.c
 *	  Version-dependent helpers that need state: the worker's named wait
 *	  events.
 *
 * Since PostgreSQL 17 an extension can name its wait events, so
 * pg_stat_activity shows "JobflowWorkerMain" rather than the generic
 * "Extension"; before 17 every wait is PG_WAIT_EXTENSION.
 *
 *-------------------------------------------------------------------------
 */
#include "compat.h"

#include "utils/wait_event.h"

/*
 * The wait event info for one of the worker's waits, registered in shared
 * memory at its first use (WaitEventExtensionNew returns the same id for
 * the same name in every process).
 */
uint32
jf_wait_event(JfWaitEvent which)
{
#if PG_VERSION_NUM >= 170000
	static const char *const names[JF_NWAIT] = {
		"JobflowWorkerMain", "JobflowSchemaWait", "JobflowLauncherMain",
		"JobflowWorkerExit"
	};
	static uint32 ids[JF_NWAIT];

	if (ids[which] == 0)
		ids[which] = WaitEventExtensionNew(names[which]);
	return ids[which];
#else
	return PG_WAIT_EXTENSION;
#endif
}
