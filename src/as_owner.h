/*-------------------------------------------------------------------------
 *
 * as_owner.h
 *	  Running a few statements as the owner of one of jobflow's tables.
 *
 * For the API functions that let a tenant do what its grants alone do not
 * (tenant_api.c, signing.c): they check the caller's right first, as the
 * caller, under row-level security, then write as the table's owner in a
 * restricted security context.  Such functions are declared with
 * SET search_path = pg_catalog, pg_temp, so that no operator or function of
 * the caller's schemas ever runs with the owner's rights.
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
} JfAsOwner;

/* Become the owner of jobflow.<relname>; an ERROR restores the caller. */
extern void jf_as_owner_begin(const char *relname, JfAsOwner *s);
extern void jf_as_owner_end(const JfAsOwner *s);

#endif							/* JOBFLOW_AS_OWNER_H */
