/*-------------------------------------------------------------------------
 *
 * as_owner.h
 *	  Running a few statements as the owner of one of jobflow's tables.
 *
 * For the API functions that let a tenant do what its grants alone do not
 * (tenant_api.c, signing.c): they check the caller's right first, as the
 * caller, under row-level security, then write as the table's owner in a
 * restricted security context.  The row checks behind the tables' triggers
 * (task_check.c) do it too, and they run under whatever search_path the
 * caller set: so becoming the owner also pins search_path to pg_catalog,
 * pg_temp until jf_as_owner_end, and every statement run as the owner
 * qualifies its operators as well.  No operator or function of the
 * caller's schemas ever runs with the owner's rights.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_AS_OWNER_H
#define JOBFLOW_AS_OWNER_H

#include "postgres.h"

typedef struct JfAsOwner
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;	/* of the pinned search_path */
} JfAsOwner;

/* Become the owner of jobflow.<relname>; an ERROR restores the caller. */
extern void jf_as_owner_begin(const char *relname, JfAsOwner *s);
extern void jf_as_owner_end(const JfAsOwner *s);

#endif							/* JOBFLOW_AS_OWNER_H */
