/*-------------------------------------------------------------------------
 *
 * tenant_api.h
 *	  Rules of the tenant boundary that several entry points share.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_TENANT_API_H
#define JOBFLOW_TENANT_API_H

#include "postgres.h"

#include "fmgr.h"

/* ERROR unless role may own tasks, timers, secrets, signing keys, queues */
extern void jf_check_owner_role(Oid role);

/*
 * The role on whose behalf the caller acts (argument argno, the caller
 * when NULL): itself, a role it has the privileges of, or any role for
 * members of jobflow_admin; else ERROR "permission denied to <action>
 * role ...".
 */
extern Oid	jf_managed_role(FunctionCallInfo fcinfo, int argno, const char *action);

#endif							/* JOBFLOW_TENANT_API_H */
