/*-------------------------------------------------------------------------
 *
 * cron_internal.h
 *	  What the cron parser (cron_parse.c) and the next-occurrence search
 *	  (cron.c) share: the Gregorian calendar rules.  Not for other modules.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_CRON_INTERNAL_H
#define JF_CRON_INTERNAL_H

#include "core/cron.h"

#define SECS_PER_DAY		INT64_C(86400)

static inline bool
jf_cron_is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static inline int
jf_cron_days_in_month(int64_t y, int m)
{
	static const int dim[] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

	return (m == 2 && jf_cron_is_leap(y)) ? 29 : dim[m];
}

#endif							/* JF_CRON_INTERNAL_H */
