/*-------------------------------------------------------------------------
 *
 * quota.h
 *	  Per-role limits on what a role may create: configured queues and
 *	  cron timers (quota.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_QUOTA_H
#define JOBFLOW_QUOTA_H

#include "postgres.h"

typedef enum JfQuotaKind
{
	JF_QUOTA_QUEUES,			/* rows of jobflow.queues */
	JF_QUOTA_TIMERS				/* rows of jobflow.cron_timers */
} JfQuotaKind;

/*
 * Refuse (53400) a new row of owner named name when the owner already has
 * as many as its limit allows; a row of that name that exists is no new
 * one.  Holds a lock per (owner, kind) until the transaction ends, so that
 * two transactions cannot both take the last place.
 */
extern void jf_quota_check(JfQuotaKind kind, Oid owner, const char *name);

#endif							/* JOBFLOW_QUOTA_H */
