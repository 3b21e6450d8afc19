/*-------------------------------------------------------------------------
 *
 * cron.h
 *	  What other SQL-callable code checks of a cron timer as cron.c does:
 *	  its name.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_API_CRON_H
#define JOBFLOW_API_CRON_H

#include "postgres.h"

/*
 * Refuse (22023) a timer name no timer can have: empty, too long, or with
 * a control character, which could forge a log line where it is quoted.
 */
extern void jf_check_cron_name(const char *name);

#endif							/* JOBFLOW_API_CRON_H */
