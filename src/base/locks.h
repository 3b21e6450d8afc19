/*-------------------------------------------------------------------------
 *
 * locks.h
 *	  jobflow's own heavyweight locks: advisory lock tags whose fourth
 *	  field ("jf" and a letter) no SQL function can produce.
 *
 * pg_advisory_lock() sets the fourth field of its tags to 1 or 2, so no
 * role can take, hold or wait on these from SQL.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_LOCKS_H
#define JOBFLOW_LOCKS_H

#include "postgres.h"

#include "miscadmin.h"
#include "storage/lock.h"

/* per (database, owner, kind): the per-role limits (api/quota.c) */
#define JF_QUOTA_LOCK_FIELD4 0x6A66
/* per database: DROP EXTENSION against the worker's transactions */
#define JF_SERVING_LOCK_FIELD4 0x6A67

/*
 * The lock that orders a worker's transactions and DROP EXTENSION jobflow
 * in this database: the worker takes it shared at the start of each
 * transaction (worker/guard.c), the DROP EXTENSION hook exclusively
 * before the drop (api/drops.c).  It is not the extension's own lock: any
 * role that owns a function may take that one exclusively (ALTER FUNCTION
 * ... DEPENDS ON EXTENSION jobflow) and hold it in an open or prepared
 * transaction, and every worker transaction waited behind it.
 */
static inline void
jf_lock_serving(LOCKMODE mode)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, JF_SERVING_LOCK_FIELD4);
	(void) LockAcquire(&tag, mode, false, false);
}

#endif							/* JOBFLOW_LOCKS_H */
