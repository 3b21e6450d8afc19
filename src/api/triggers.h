/*-------------------------------------------------------------------------
 *
 * triggers.h
 *	  The check every trigger function of jobflow makes first (triggers.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_TRIGGERS_H
#define JOBFLOW_TRIGGERS_H

#include "postgres.h"

#include "fmgr.h"

/*
 * Refuse, with SQLSTATE 39P01, a trigger function of jobflow's that is
 * not fired as it was declared: by the trigger manager, at the given
 * timing and level, on jobflow.<relname>.
 */
extern void jf_require_trigger(FunctionCallInfo fcinfo, const char *funcname,
							   bool before, bool row, const char *relname);

#endif							/* JOBFLOW_TRIGGERS_H */
