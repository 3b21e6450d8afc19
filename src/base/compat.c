/*-------------------------------------------------------------------------
 *
 * compat.c
 *	  Version-dependent helpers that need state: the worker's named wait
 *	  events, and the settings its sessions pin (transaction_timeout since
 *	  17).
 *
 * Since PostgreSQL 17 an extension can name its wait events, so
 * pg_stat_activity shows "JobflowWorkerMain" rather than the generic
 * "Extension"; before 17 every wait is PG_WAIT_EXTENSION.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "utils/guc.h"
#include "utils/tuplestore.h"
#include "utils/wait_event.h"

#include "base/compat.h"

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

/*
 * Called right after a background worker connects, before its first
 * transaction.  Read-only or serializable transactions by default would
 * fail every write of the worker, or some of its claims; a transaction
 * timeout ends the session (FATAL), which the worker would then meet at
 * every restart, and exit_on_error turns each error it recovers from into
 * its end.  statement_timeout, lock_timeout and the idle timeouts
 * are the worker's own business (worker.c): the probe runs no statement.
 */
void
jf_pin_session_settings(void)
{
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET,
					PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_deferrable", "off", PGC_SUSET, PGC_S_OVERRIDE);
	/* every error the worker recovers from would end it (FATAL) */
	SetConfigOption("exit_on_error", "off", PGC_SUSET, PGC_S_OVERRIDE);
#if PG_VERSION_NUM >= 170000
	SetConfigOption("transaction_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
#endif
}

#if PG_VERSION_NUM < 150000
/*
 * 14 has no InitMaterializedSRF(): the same set-up, as 15 does it, for the
 * callers that return their rows in one tuplestore.
 */
void
jf_init_materialized_srf(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext old;
	TupleDesc	tupdesc;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	if (!(rsinfo->allowedModes & SFRM_Materialize))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("materialize mode required, but it is not allowed in this context")));
	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = tuplestore_begin_heap((rsinfo->allowedModes & SFRM_Materialize_Random) != 0,
											  false, work_mem);
	rsinfo->setDesc = CreateTupleDescCopy(tupdesc);
	MemoryContextSwitchTo(old);
}
#endif
