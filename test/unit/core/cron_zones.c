/*-------------------------------------------------------------------------
 *
 * cron_zones.c
 *	  Date helpers and test time zones shared by the cron unit tests.
 *
 * See cron_zones.h.  The rule zones compute their transitions for
 * 1900-2100 once, with the C library's calendar, so they share no code
 * with cron.c.
 *
 *-------------------------------------------------------------------------
 */
#include "cron_zones.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* "YYYY-MM-DD HH:MM:SS" in UTC to Unix seconds, via the C library */
int64_t
T(const char *s)
{
	struct tm	tm;

	memset(&tm, 0, sizeof(tm));
	if (sscanf(s, "%d-%d-%d %d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
			   &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
	{
		printf("bad date literal %s\n", s);
		exit(2);
	}
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t) timegm(&tm);
}

/* Format for failure messages; rotates among a few buffers */
const char *
fmt(int64_t t)
{
	static char bufs[4][32];
	static int	n;
	char	   *b = bufs[n++ % 4];
	time_t		tt = (time_t) t;
	struct tm	tm;

	gmtime_r(&tt, &tm);
	strftime(b, 32, "%Y-%m-%d %H:%M:%S", &tm);
	return b;
}

static int64_t
nth_sunday(int y, int month, int week)
{
	char		buf[32];
	int64_t		first;
	struct tm	tm;
	time_t		tt;
	int			day;

	snprintf(buf, sizeof(buf), "%04d-%02d-01 00:00:00", y, month);
	first = T(buf);
	tt = (time_t) first;
	gmtime_r(&tt, &tm);
	day = 1 + (7 - tm.tm_wday) % 7;
	if (week > 0)
		day += 7 * (week - 1);
	else
	{
		while (day + 7 <= (month == 2 ? 28 : (month == 4 || month == 6 ||
											  month == 9 || month == 11) ? 30 : 31))
			day += 7;
	}
	return first + (int64_t) (day - 1) * 86400;
}

static void
rule_zone_init(RuleZone *z)
{
	int			y;

	z->ntrans = 0;
	for (y = 1900; y <= 2100; y++)
	{
		z->trans[z->ntrans++] = nth_sunday(y, z->start_month, z->start_week) + z->start_utc;
		z->trans[z->ntrans++] = nth_sunday(y, z->end_month, z->end_week) + z->end_utc;
	}
}

/* Even index = a DST start, so after k transitions the offset is dst iff k odd */
static bool
rule_zone_lookup(void *arg, int64_t t, int32_t *off, int64_t *next, int32_t *next_off)
{
	RuleZone   *z = arg;
	int			lo = 0,
				hi = z->ntrans;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (z->trans[mid] <= t)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* lo = number of transitions at or before t */
	*off = (lo % 2) ? z->dst : z->std;
	if (lo == z->ntrans)
	{
		*next = JF_CRON_NEVER;
		*next_off = *off;
	}
	else
	{
		*next = z->trans[lo];
		*next_off = (lo % 2) ? z->std : z->dst;
	}
	return true;
}

int32_t
zone_offset(const JfCronZone *zone, int64_t t)
{
	int32_t		off,
				noff;
	int64_t		next;

	zone->lookup(zone->arg, t, &off, &next, &noff);
	return off;
}

RuleZone paris = {3600, 7200, 3, -1, 3600, 10, -1, 3600, 0, {0}};
RuleZone newyork = {-5 * 3600, -4 * 3600, 3, 2, 7 * 3600, 11, 1, 6 * 3600, 0, {0}};
JfCronZone paris_zone = {rule_zone_lookup, &paris};
JfCronZone ny_zone = {rule_zone_lookup, &newyork};

/* Constant +01:00 that nevertheless reports a "transition" every 6 hours */
static bool
noop_zone_lookup(void *arg, int64_t t, int32_t *off, int64_t *next, int32_t *next_off)
{
	(void) arg;
	*off = 3600;
	*next_off = 3600;
	*next = (t >= 0 ? t / 21600 : (t - 21599) / 21600) * 21600 + 21600;
	return true;
}

/* Constant +01:00 with no transitions */
static bool
fixed_zone_lookup(void *arg, int64_t t, int32_t *off, int64_t *next, int32_t *next_off)
{
	(void) t;
	*off = *(int32_t *) arg;
	*next_off = *off;
	*next = JF_CRON_NEVER;
	return true;
}

static int32_t plus_one_hour = 3600;
JfCronZone noop_zone = {noop_zone_lookup, NULL};
JfCronZone fixed_zone = {fixed_zone_lookup, &plus_one_hour};

static bool
failing_lookup(void *arg, int64_t t, int32_t *off, int64_t *next, int32_t *next_off)
{
	(void) arg;
	(void) t;
	(void) off;
	(void) next;
	(void) next_off;
	return false;
}

JfCronZone failing_zone = {failing_lookup, NULL};

/* Timings printed by the tests (never asserted but for a coarse bound) */
double
now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void
cron_zones_init(void)
{
	rule_zone_init(&paris);
	rule_zone_init(&newyork);
}
