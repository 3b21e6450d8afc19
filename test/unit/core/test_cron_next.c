/*-------------------------------------------------------------------------
 *
 * test_cron_next.c
 *	  Unit tests for src/cron.c: next occurrence, known answers.
 *
 * Hand-written cases in UTC (month ends, leap years, day-of-month OR
 * day-of-week, seconds) and across DST in the rule-based test zones of
 * cron_zones.c (skipped and repeated local times, firing counts over a
 * year), plus schedules that can never fire.
 *
 *-------------------------------------------------------------------------
 */
#include "core/cron.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cron_zones.h"
#include "unit.h"

/* ----------------------------------------------------------------
 *		Next occurrence: known answers
 * ----------------------------------------------------------------
 */

typedef struct NextCase
{
	const char *expr;
	const JfCronZone *zone;
	const char *after;
	const char *expect;			/* NULL: jf_cron_next must return false */
} NextCase;

static void
run_cases(const char *what, const NextCase *c, size_t n)
{
	size_t		i;

	for (i = 0; i < n; i++)
	{
		JfCronSchedule s;
		JfCronError e;
		int64_t		got = 0;
		bool		r;

		if (!jf_cron_parse(c[i].expr, &s, &e))
		{
			CHECKF(false, "%s: \"%s\" rejected: %s", what, c[i].expr, e.message);
			continue;
		}
		r = jf_cron_next(&s, c[i].zone, T(c[i].after), &got);
		if (c[i].expect == NULL)
			CHECKF(!r, "%s: \"%s\" after %s: expected none, got %s", what,
				  c[i].expr, c[i].after, fmt(got));
		else
			CHECKF(r && got == T(c[i].expect),
				  "%s: \"%s\" after %s: expected %s, got %s", what, c[i].expr,
				  c[i].after, c[i].expect, r ? fmt(got) : "none");
	}
}

#define NCASES(a) (sizeof(a) / sizeof((a)[0]))

static void
test_next_utc(void)
{
	static const NextCase c[] = {
		/* month ends */
		{"0 0 31 * *", NULL, "2024-01-31 00:00:00", "2024-03-31 00:00:00"},
		{"0 0 31 * *", NULL, "2024-03-31 00:00:00", "2024-05-31 00:00:00"},
		{"0 0 31 * *", NULL, "2024-03-30 23:59:59", "2024-03-31 00:00:00"},
		{"0 0 30 * *", NULL, "2024-01-30 00:00:00", "2024-03-30 00:00:00"},
		{"0 0 31 * *", NULL, "2024-12-31 00:00:00", "2025-01-31 00:00:00"},
		/* leap years */
		{"0 0 29 2 *", NULL, "2024-02-29 00:00:00", "2028-02-29 00:00:00"},
		{"0 0 29 2 *", NULL, "2023-03-01 00:00:00", "2024-02-29 00:00:00"},
		{"0 0 29 2 *", NULL, "2096-03-01 00:00:00", "2104-02-29 00:00:00"},
		{"0 0 29 * *", NULL, "2023-01-29 12:00:00", "2023-03-29 00:00:00"},
		{"0 0 29 * *", NULL, "2024-01-29 12:00:00", "2024-02-29 00:00:00"},
		{"0 0 29 2 */7", NULL, "2088-03-01 00:00:00", "2128-02-29 00:00:00"},
		/* day-of-month / day-of-week: OR when both restricted */
		{"0 0 13 * 5", NULL, "2024-09-01 00:00:00", "2024-09-06 00:00:00"},
		{"0 0 13 * 5", NULL, "2024-09-07 00:00:00", "2024-09-13 00:00:00"},
		{"0 0 13 * 5", NULL, "2024-10-11 00:00:00", "2024-10-13 00:00:00"},
		{"0 0 13 * fri", NULL, "2024-09-13 00:00:00", "2024-09-20 00:00:00"},
		/* ... AND when either starts with '*' */
		{"0 0 13 * */5", NULL, "2024-01-01 00:00:00", "2024-09-13 00:00:00"},
		{"0 0 * * 5", NULL, "2024-09-01 00:00:00", "2024-09-06 00:00:00"},
		{"0 0 */2 * 5", NULL, "2024-09-01 00:00:00", "2024-09-13 00:00:00"},
		{"0 0 13 * *", NULL, "2024-09-01 00:00:00", "2024-09-13 00:00:00"},
		/* names and steps */
		{"0 9 * * mon-fri", NULL, "2024-09-13 09:00:00", "2024-09-16 09:00:00"},
		{"0 9 * * mon-fri", NULL, "2024-09-13 08:59:59", "2024-09-13 09:00:00"},
		{"0 0 1 jan,jul *", NULL, "2024-01-01 00:00:00", "2024-07-01 00:00:00"},
		{"0 12 * * 7", NULL, "2024-01-01 00:00:00", "2024-01-07 12:00:00"},
		{"0 12 * * sun", NULL, "2024-01-07 12:00:00", "2024-01-14 12:00:00"},
		{"5-40/5 * * * *", NULL, "2024-01-01 10:40:00", "2024-01-01 11:05:00"},
		{"5/15 * * * *", NULL, "2024-01-01 10:50:00", "2024-01-01 11:05:00"},
		{"5/15 * * * *", NULL, "2024-01-01 10:35:00", "2024-01-01 10:50:00"},
		{"*/10 * * * *", NULL, "2024-01-01 10:50:00", "2024-01-01 11:00:00"},
		{"0 */6 * * *", NULL, "2024-01-01 18:00:00", "2024-01-02 00:00:00"},
		/* seconds field */
		{"*/10 * * * * *", NULL, "2024-01-01 00:00:00", "2024-01-01 00:00:10"},
		{"*/10 * * * * *", NULL, "2024-01-01 00:00:05", "2024-01-01 00:00:10"},
		{"30 0 0 1 1 *", NULL, "2024-01-01 00:00:30", "2025-01-01 00:00:30"},
		{"59 59 23 31 12 *", NULL, "2024-06-01 00:00:00", "2024-12-31 23:59:59"},
		{"* * * * * *", NULL, "2024-12-31 23:59:59", "2025-01-01 00:00:00"},
		{"15,45 * * * * *", NULL, "2024-12-31 23:59:45", "2025-01-01 00:00:15"},
		/* year-end rollovers, strictly after */
		{"* * * * *", NULL, "2024-12-31 23:59:30", "2025-01-01 00:00:00"},
		{"59 23 31 12 *", NULL, "2024-12-31 23:59:00", "2025-12-31 23:59:00"},
		{"0 0 1 1 *", NULL, "2024-01-01 00:00:00", "2025-01-01 00:00:00"},
		{"0 0 1 1 *", NULL, "2023-12-31 23:59:59", "2024-01-01 00:00:00"},
		/* macros */
		{"@yearly", NULL, "2024-01-01 00:00:00", "2025-01-01 00:00:00"},
		{"@annually", NULL, "2023-12-31 23:59:59", "2024-01-01 00:00:00"},
		{"@monthly", NULL, "2024-12-15 00:00:00", "2025-01-01 00:00:00"},
		{"@weekly", NULL, "2024-01-01 00:00:00", "2024-01-07 00:00:00"},
		{"@daily", NULL, "2024-02-28 00:00:00", "2024-02-29 00:00:00"},
		{"@midnight", NULL, "2024-02-29 00:00:00", "2024-03-01 00:00:00"},
		{"@hourly", NULL, "2024-02-28 23:00:00", "2024-02-29 00:00:00"},
		/* intervals: multiples of N since the epoch, strictly after */
		{"every 10 seconds", NULL, "2024-01-01 00:00:00", "2024-01-01 00:00:10"},
		{"every 10 seconds", NULL, "2024-01-01 00:00:03", "2024-01-01 00:00:10"},
		{"every 10 seconds", NULL, "2024-01-01 00:00:09", "2024-01-01 00:00:10"},
		{"every 1 hour", NULL, "2024-01-01 10:59:59", "2024-01-01 11:00:00"},
		{"every 1 hour", NULL, "2024-01-01 11:00:00", "2024-01-01 12:00:00"},
		{"every 2 days", NULL, "2024-01-01 00:00:00", "2024-01-02 00:00:00"},
		{"every 90 minutes", NULL, "2024-01-01 00:00:00", "2024-01-01 01:30:00"},
		{"every 90 minutes", NULL, "2024-01-01 01:29:59", "2024-01-01 01:30:00"},
		/* a constant +01:00 zone shifts local schedules only */
		{"0 0 * * *", &fixed_zone, "2024-01-01 00:00:00", "2024-01-01 23:00:00"},
		{"0 0 1 1 *", &fixed_zone, "2024-06-01 00:00:00", "2024-12-31 23:00:00"},
		{"every 1 hour", &fixed_zone, "2024-01-01 00:30:00", "2024-01-01 01:00:00"},
	};

	run_cases("utc", c, NCASES(c));
	{
		JfCronSchedule s;
		int64_t		n = 0;

		jf_cron_parse("every 7 seconds", &s, NULL);
		CHECKF(jf_cron_next(&s, NULL, 0, &n) && n == 7, "interval at 0: %lld", (long long) n);
		CHECKF(jf_cron_next(&s, NULL, -1, &n) && n == 0, "interval at -1: %lld", (long long) n);
		CHECKF(jf_cron_next(&s, NULL, -8, &n) && n == -7, "interval at -8: %lld", (long long) n);
		jf_cron_parse("0 0 1 1 *", &s, NULL);
		CHECKF(jf_cron_next(&s, NULL, T("1969-06-01 00:00:00"), &n) &&
			  n == T("1970-01-01 00:00:00"), "before the epoch: %s", fmt(n));
		CHECKF(!jf_cron_next(&s, NULL, JF_CRON_MAX_TIME + 1, &n), "after beyond range");
		CHECKF(!jf_cron_next(&s, NULL, JF_CRON_MIN_TIME - 1, &n), "after before range");
		CHECKF(!jf_cron_next(&s, &failing_zone, 0, &n), "zone failure is reported");
	}
}

static void
test_next_dst(void)
{
	static const NextCase c[] = {
		/* Paris 2024: 02:00 CET -> 03:00 CEST on Mar 31 at 01:00 UTC */
		{"30 2 * * *", &paris_zone, "2024-03-29 12:00:00", "2024-03-30 01:30:00"},
		{"30 2 * * *", &paris_zone, "2024-03-30 12:00:00", "2024-03-31 01:30:00"},
		{"30 2 * * *", &paris_zone, "2024-03-31 01:30:00", "2024-04-01 00:30:00"},
		{"0 2 * * *", &paris_zone, "2024-03-30 12:00:00", "2024-03-31 01:00:00"},
		{"30 3 * * *", &paris_zone, "2024-03-30 12:00:00", "2024-03-31 01:30:00"},
		{"30 2,3 * * *", &paris_zone, "2024-03-31 00:00:00", "2024-03-31 01:30:00"},
		{"30 2,3 * * *", &paris_zone, "2024-03-31 01:30:00", "2024-04-01 00:30:00"},
		{"*/15 2 * * *", &paris_zone, "2024-03-31 00:59:59", "2024-03-31 01:00:00"},
		{"*/15 2 * * *", &paris_zone, "2024-03-31 01:00:00", "2024-03-31 01:15:00"},
		{"*/15 2 * * *", &paris_zone, "2024-03-31 01:45:00", "2024-04-01 00:00:00"},
		{"5,50 2,3 * * *", &paris_zone, "2024-03-31 00:59:59", "2024-03-31 01:05:00"},
		{"5,50 2,3 * * *", &paris_zone, "2024-03-31 01:05:00", "2024-03-31 01:50:00"},
		{"5,50 2,3 * * *", &paris_zone, "2024-03-31 01:50:00", "2024-04-01 00:05:00"},
		{"0 0 * * *", &paris_zone, "2024-03-30 12:00:00", "2024-03-30 23:00:00"},
		{"0 0 * * *", &paris_zone, "2024-03-30 23:00:00", "2024-03-31 22:00:00"},
		/* wildcard hour: real elapsed time, the skipped hour has nothing */
		{"*/15 * * * *", &paris_zone, "2024-03-31 00:50:00", "2024-03-31 01:00:00"},
		{"30 * * * *", &paris_zone, "2024-03-31 00:30:00", "2024-03-31 01:30:00"},
		{"0 */2 * * *", &paris_zone, "2024-03-30 23:00:00", "2024-03-31 02:00:00"},
		/* Paris 2024: 03:00 CEST -> 02:00 CET on Oct 27 at 01:00 UTC */
		{"30 2 * * *", &paris_zone, "2024-10-26 12:00:00", "2024-10-27 00:30:00"},
		{"30 2 * * *", &paris_zone, "2024-10-27 00:30:00", "2024-10-28 01:30:00"},
		{"30 2 * * *", &paris_zone, "2024-10-27 01:00:00", "2024-10-28 01:30:00"},
		{"30 2 * * *", &paris_zone, "2024-10-27 01:10:00", "2024-10-28 01:30:00"},
		{"*/15 2 * * *", &paris_zone, "2024-10-27 00:45:00", "2024-10-28 01:00:00"},
		{"*/15 * * * *", &paris_zone, "2024-10-27 00:50:00", "2024-10-27 01:00:00"},
		{"30 * * * *", &paris_zone, "2024-10-27 00:30:00", "2024-10-27 01:30:00"},
		{"30 * * * *", &paris_zone, "2024-10-27 01:30:00", "2024-10-27 02:30:00"},
		{"0 */2 * * *", &paris_zone, "2024-10-27 00:00:00", "2024-10-27 01:00:00"},
		{"0 */2 * * *", &paris_zone, "2024-10-27 01:00:00", "2024-10-27 03:00:00"},
		/* year end in local time */
		{"0 0 1 1 *", &paris_zone, "2024-06-01 00:00:00", "2024-12-31 23:00:00"},
		{"@yearly", &paris_zone, "2024-12-31 23:00:00", "2025-12-31 23:00:00"},
		{"59 23 31 12 *", &paris_zone, "2024-12-31 22:59:00", "2025-12-31 22:59:00"},
		{"0 0 1 7 *", &paris_zone, "2024-01-01 00:00:00", "2024-06-30 22:00:00"},
		/* intervals ignore the zone */
		{"every 1 hour", &paris_zone, "2024-03-31 00:30:00", "2024-03-31 01:00:00"},
		{"every 10 minutes", &paris_zone, "2024-10-27 00:55:00", "2024-10-27 01:00:00"},
		/* New York 2024: 02:00 EST -> 03:00 EDT on Mar 10 at 07:00 UTC */
		{"30 2 * * *", &ny_zone, "2024-03-08 12:00:00", "2024-03-09 07:30:00"},
		{"30 2 * * *", &ny_zone, "2024-03-09 12:00:00", "2024-03-10 07:30:00"},
		{"30 2 * * *", &ny_zone, "2024-03-10 07:30:00", "2024-03-11 06:30:00"},
		{"0 2 * * *", &ny_zone, "2024-03-09 12:00:00", "2024-03-10 07:00:00"},
		{"0 3 * * *", &ny_zone, "2024-03-09 12:00:00", "2024-03-10 07:00:00"},
		{"*/30 * * * *", &ny_zone, "2024-03-10 06:30:00", "2024-03-10 07:00:00"},
		/* New York 2024: 02:00 EDT -> 01:00 EST on Nov 3 at 06:00 UTC */
		{"30 1 * * *", &ny_zone, "2024-11-02 12:00:00", "2024-11-03 05:30:00"},
		{"30 1 * * *", &ny_zone, "2024-11-03 05:30:00", "2024-11-04 06:30:00"},
		{"30 1 * * *", &ny_zone, "2024-11-03 06:00:00", "2024-11-04 06:30:00"},
		{"*/30 * * * *", &ny_zone, "2024-11-03 05:00:00", "2024-11-03 05:30:00"},
		{"*/30 * * * *", &ny_zone, "2024-11-03 05:30:00", "2024-11-03 06:00:00"},
		{"*/30 * * * *", &ny_zone, "2024-11-03 06:00:00", "2024-11-03 06:30:00"},
		{"0 0 * * *", &ny_zone, "2024-11-02 12:00:00", "2024-11-03 04:00:00"},
		{"0 0 * * *", &ny_zone, "2024-11-03 04:00:00", "2024-11-04 05:00:00"},
		{"0 9 * * mon-fri", &ny_zone, "2024-11-01 13:00:00", "2024-11-04 14:00:00"},
	};

	run_cases("dst", c, NCASES(c));

	/* count fires across each Paris change: both passes vs. once */
	{
		static const struct
		{
			const char *expr;
			const char *from;
			const char *to;
			int			expect;
		}			counts[] = {
			{"*/15 * * * *", "2024-10-27 00:00:00", "2024-10-27 02:00:00", 8},
			{"*/15 2 * * *", "2024-10-27 00:00:00", "2024-10-27 02:00:00", 4},
			{"*/15 * * * *", "2024-03-31 00:00:00", "2024-03-31 02:00:00", 8},
			{"*/15 2 * * *", "2024-03-31 00:00:00", "2024-03-31 02:00:00", 4},
			{"* * * * * *", "2024-10-27 00:00:00", "2024-10-27 02:00:00", 7200},
			/* the local day of Oct 27 lasts 25 hours, that of Mar 31 23 */
			{"0 * * * *", "2024-10-26 22:00:00", "2024-10-27 23:00:00", 25},
			{"0 0-23 * * *", "2024-10-26 22:00:00", "2024-10-27 23:00:00", 24},
			{"0 * * * *", "2024-03-30 23:00:00", "2024-03-31 22:00:00", 23},
			/* 02:00 shifts onto 03:00 CEST: one firing for both */
			{"0 0-23 * * *", "2024-03-30 23:00:00", "2024-03-31 22:00:00", 23},
		};
		size_t		i;

		for (i = 0; i < NCASES(counts); i++)
		{
			JfCronSchedule s;
			int64_t		t = T(counts[i].from) - 1,
						end = T(counts[i].to),
						n;
			int			k = 0;

			jf_cron_parse(counts[i].expr, &s, NULL);
			while (jf_cron_next(&s, &paris_zone, t, &n) && n < end && k < 100000)
			{
				CHECKF(n > t, "strictly after");
				t = n;
				k++;
			}
			CHECKF(k == counts[i].expect, "\"%s\" fires %d times from %s to %s, want %d",
				  counts[i].expr, k, counts[i].from, counts[i].to, counts[i].expect);
		}
	}
}

/* Schedules that cannot fire (built by hand: parse refuses them) */
static void
test_impossible(void)
{
	JfCronSchedule s;
	int64_t		n;
	double		t0,
				el;

	jf_cron_parse("0 0 1 2 *", &s, NULL);
	s.days = 1u << 30;			/* February 30 */
	t0 = now_sec();
	CHECKF(!jf_cron_next(&s, NULL, T("2024-01-01 00:00:00"), &n), "Feb 30 in UTC");
	CHECKF(!jf_cron_next(&s, &paris_zone, T("2024-01-01 00:00:00"), &n), "Feb 30 in Paris");
	CHECKF(!jf_cron_next(&s, &noop_zone, T("2024-01-01 00:00:00"), &n), "Feb 30, noop zone");
	el = now_sec() - t0;
	printf("impossible schedule: 3 searches of %d years in %.1f us\n",
		   JF_CRON_HORIZON_YEARS, el * 1e6);
	CHECKF(el < 0.5, "impossible schedules give up quickly (%.3f s)", el);

	jf_cron_parse("* * * * *", &s, NULL);
	s.hours = 0;
	CHECKF(!jf_cron_next(&s, NULL, 0, &n), "empty hour mask");
	jf_cron_parse("* * * * *", &s, NULL);
	s.days = 0;
	s.weekdays = 0;
	CHECKF(!jf_cron_next(&s, NULL, 0, &n), "no day at all");
	jf_cron_parse("0 0 31 * *", &s, NULL);
	s.months = 1u << 4;
	CHECKF(!jf_cron_next(&s, NULL, 0, &n), "April 31");
}

int
main(void)
{
	cron_zones_init();

	test_next_utc();
	test_next_dst();
	test_impossible();

	return unit_done("test_cron_next");
}
