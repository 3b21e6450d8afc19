/*-------------------------------------------------------------------------
 *
 * cron_zones.h
 *	  Date helpers and test time zones shared by the cron unit tests.
 *
 * Expected instants are written as UTC date strings and converted with the
 * C library's timegm(), independently of cron.c's own calendar code.  Two
 * rule-based test zones stand in for pg_tz: a Paris-like one (+1, +2 from
 * the last Sunday of March to the last Sunday of October, 01:00 UTC) and a
 * New-York-like one (-5, -4 from the second Sunday of March 02:00 local to
 * the first Sunday of November 02:00 local).  A few odd zones (a constant
 * offset, one reporting a vain transition every 6 hours, one whose lookup
 * fails) test the edges of the zone interface.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_CRON_ZONES_H
#define JF_CRON_ZONES_H

#include "core/cron.h"

typedef struct RuleZone
{
	int32_t		std;
	int32_t		dst;
	int			start_month;
	int			start_week;		/* nth Sunday, -1 = last */
	int32_t		start_utc;		/* seconds after 00:00 UTC of that day */
	int			end_month;
	int			end_week;
	int32_t		end_utc;
	int			ntrans;
	int64_t		trans[2 * 201]; /* DST starts and ends, 1900-2100, sorted */
} RuleZone;

/* fill in the transitions of paris and newyork; once, before any test */
extern void cron_zones_init(void);

extern int64_t T(const char *s);
extern const char *fmt(int64_t t);
extern double now_sec(void);
extern int32_t zone_offset(const JfCronZone *zone, int64_t t);

extern RuleZone paris;
extern RuleZone newyork;
extern JfCronZone paris_zone;
extern JfCronZone ny_zone;
extern JfCronZone noop_zone;
extern JfCronZone fixed_zone;
extern JfCronZone failing_zone;

#endif							/* JF_CRON_ZONES_H */
