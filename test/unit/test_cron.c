/*-------------------------------------------------------------------------
 *
 * test_cron.c
 *	  Unit tests for src/cron.c: parsing, next occurrence, DST rules.
 *
 * Expected instants are written as UTC date strings and converted with the
 * C library's timegm(), independently of cron.c's own calendar code.  Two
 * rule-based test zones stand in for pg_tz: a Paris-like one (+1, +2 from
 * the last Sunday of March to the last Sunday of October, 01:00 UTC) and a
 * New-York-like one (-5, -4 from the second Sunday of March 02:00 local to
 * the first Sunday of November 02:00 local).  Randomised expressions are
 * cross-checked against brute-force references that know nothing about the
 * schedule's bitmasks: they evaluate sets built alongside the expression
 * text.
 *
 *-------------------------------------------------------------------------
 */
#include "cron.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int	passed;
static int	failed;

#define CHECK(cond, ...) \
	do { \
		if (cond) \
			passed++; \
		else \
		{ \
			failed++; \
			printf("FAIL %s:%d: ", __FILE__, __LINE__); \
			printf(__VA_ARGS__); \
			printf("\n"); \
		} \
	} while (0)

/* "YYYY-MM-DD HH:MM:SS" in UTC to Unix seconds, via the C library */
static int64_t
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
static const char *
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

/* ----------------------------------------------------------------
 *		Test zones
 * ----------------------------------------------------------------
 */

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

static int32_t
zone_offset(const JfCronZone *zone, int64_t t)
{
	int32_t		off,
				noff;
	int64_t		next;

	zone->lookup(zone->arg, t, &off, &next, &noff);
	return off;
}

static RuleZone paris = {3600, 7200, 3, -1, 3600, 10, -1, 3600, 0, {0}};
static RuleZone newyork = {-5 * 3600, -4 * 3600, 3, 2, 7 * 3600, 11, 1, 6 * 3600, 0, {0}};
static JfCronZone paris_zone = {rule_zone_lookup, &paris};
static JfCronZone ny_zone = {rule_zone_lookup, &newyork};

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
static JfCronZone noop_zone = {noop_zone_lookup, NULL};
static JfCronZone fixed_zone = {fixed_zone_lookup, &plus_one_hour};

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

static JfCronZone failing_zone = {failing_lookup, NULL};

/* ----------------------------------------------------------------
 *		Parsing
 * ----------------------------------------------------------------
 */

static void
test_parse_valid(void)
{
	static const char *const ok[] = {
		"* * * * *", "0 0 1 1 *", "*/5 * * * *", "1,2,5 * * * *",
		"5-40/5 * * * *", "5/15 * * * *", "0 9 * * mon-fri",
		"0 0 1 jan,JUL *", "0 0 * * SUN", "0 0 * * 7", "0 0 * * 0-7",
		"0 0 * * Monday,friday", "0 0 * January-March *", "0 0 * * mon-sun",
		"*/10 * * * * *", "0-59/7 0-23/5 1-31/3 1-12/4 0-7/2",
		"  \t0\n0 \t *  *  *  ", "59 23 31 12 *", "0 0 29 2 *", "0 0 30 2 1",
		"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight",
		"@hourly", "@DAILY", "  @hourly  ", "every 10 seconds", "every 5 minutes",
		"every 1 hour", "every 2 hours", "every 30 s", "every 1 d", "every 10s",
		"EVERY 5 Minutes", "every minute", "every 366 days", "*,5 * * * *",
		"0 0 */31 * *", "0 0 1 */12 *",
	};
	size_t		i;
	JfCronSchedule s,
				t;
	JfCronError e;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		CHECK(jf_cron_parse(ok[i], &s, &e), "\"%s\" rejected: %s at %d",
			  ok[i], e.message, e.position);

	/* field contents */
	jf_cron_parse("1,2,5 * * * *", &s, &e);
	CHECK(s.minutes == ((1ull << 1) | (1ull << 2) | (1ull << 5)), "list");
	CHECK(s.seconds == 1, "no seconds field means second 0");
	CHECK(s.hours == 0xffffff && s.days == 0xfffffffe && s.months == 0x1ffe &&
		  s.weekdays == 0x7f, "stars");
	CHECK((s.flags & (JF_CRON_HOUR_STAR | JF_CRON_DOM_STAR | JF_CRON_DOW_STAR)) ==
		  (JF_CRON_HOUR_STAR | JF_CRON_DOM_STAR | JF_CRON_DOW_STAR), "star flags");
	jf_cron_parse("5-40/5 * * * *", &s, &e);
	{
		uint64_t	m = 0;
		int			v;

		for (v = 5; v <= 40; v += 5)
			m |= 1ull << v;
		CHECK(s.minutes == m, "range with step");
	}
	jf_cron_parse("5/15 * * * *", &s, &e);
	CHECK(s.minutes == ((1ull << 5) | (1ull << 20) | (1ull << 35) | (1ull << 50)),
		  "N/step means N-max/step");
	jf_cron_parse("*/10 * * * *", &s, &e);
	CHECK(s.minutes == ((1ull << 0) | (1ull << 10) | (1ull << 20) | (1ull << 30) |
						(1ull << 40) | (1ull << 50)), "*/10");
	jf_cron_parse("0 0 * * 7", &s, &e);
	CHECK(s.weekdays == 1, "7 is Sunday");
	jf_cron_parse("0 0 * * mon-sun", &s, &e);
	CHECK(s.weekdays == 0x7f, "mon-sun is the whole week");
	jf_cron_parse("0 0 * * sun-sun", &s, &e);
	CHECK(s.weekdays == 1, "sun-sun is Sunday only");
	jf_cron_parse("0 0 * * fri-sun", &s, &e);
	CHECK(s.weekdays == ((1 << 5) | (1 << 6) | 1), "fri-sun");
	jf_cron_parse("0 0 * JAN-Mar,Dec *", &s, &e);
	CHECK(s.months == ((1 << 1) | (1 << 2) | (1 << 3) | (1 << 12)), "month names");
	jf_cron_parse("0 0 * * Monday,friday", &s, &e);
	CHECK(s.weekdays == ((1 << 1) | (1 << 5)), "full day names");
	jf_cron_parse("0 0 13 * 5", &s, &e);
	CHECK((s.flags & (JF_CRON_DOM_STAR | JF_CRON_DOW_STAR)) == 0 &&
		  !(s.flags & JF_CRON_HOUR_STAR), "restricted flags");
	jf_cron_parse("0 */2 * * *", &s, &e);
	CHECK(s.flags & JF_CRON_HOUR_STAR, "hour step is a wildcard hour");
	jf_cron_parse("0 0-23 * * *", &s, &e);
	CHECK(!(s.flags & JF_CRON_HOUR_STAR), "explicit 0-23 is a fixed hour");
	jf_cron_parse("*/10 * * * * *", &s, &e);
	CHECK(s.seconds == ((1ull << 0) | (1ull << 10) | (1ull << 20) |
						(1ull << 30) | (1ull << 40) | (1ull << 50)) &&
		  s.minutes == 0x0fffffffffffffffull && (s.flags & JF_CRON_HAS_SECONDS),
		  "seconds field");

	/* macros expand to their 5-field forms */
	jf_cron_parse("@yearly", &s, &e);
	jf_cron_parse("0 0 1 1 *", &t, &e);
	CHECK(memcmp(&s, &t, sizeof(s)) == 0, "@yearly");
	jf_cron_parse("@weekly", &s, &e);
	jf_cron_parse("0 0 * * 0", &t, &e);
	CHECK(memcmp(&s, &t, sizeof(s)) == 0, "@weekly");
	jf_cron_parse("@hourly", &s, &e);
	jf_cron_parse("0 * * * *", &t, &e);
	CHECK(memcmp(&s, &t, sizeof(s)) == 0, "@hourly");

	/* intervals */
	{
		static const struct
		{
			const char *expr;
			int64_t		secs;
		}			iv[] = {
			{"every 10 seconds", 10}, {"every 30 s", 30}, {"every 1 second", 1},
			{"every 5 minutes", 300}, {"every 1 min", 60}, {"every minute", 60},
			{"every 1 hour", 3600}, {"every 2 hours", 7200}, {"every 3h", 10800},
			{"every 2 days", 172800}, {"every 10s", 10}, {"EVERY 5 Minutes", 300},
		};

		for (i = 0; i < sizeof(iv) / sizeof(iv[0]); i++)
		{
			bool		r = jf_cron_parse(iv[i].expr, &s, &e);

			CHECK(r && (s.flags & JF_CRON_INTERVAL) && s.interval == iv[i].secs,
				  "interval \"%s\": %lld", iv[i].expr, (long long) s.interval);
		}
	}
}

static void
test_parse_invalid(void)
{
	static const struct
	{
		const char *expr;
		const char *message;
		int			position;
	}			bad[] = {
		{"", "schedule is empty", 0},
		{"   \t ", "schedule is empty", 0},
		{"* * * *", "expected 5 or 6 fields, found 4", 7},
		{"  1 2 3 4  ", "expected 5 or 6 fields, found 4", 9},
		{"* * * * * * *", "expected 5 or 6 fields, found 7", 12},
		{"61 * * * *", "value 61 out of range for minute field (0-59)", 0},
		{"* 24 * * *", "value 24 out of range for hour field (0-23)", 2},
		{"* * 0 * *", "value 0 out of range for day-of-month field (1-31)", 4},
		{"* * 32 * *", "value 32 out of range for day-of-month field (1-31)", 4},
		{"* * * 13 *", "value 13 out of range for month field (1-12)", 6},
		{"* * * 0 *", "value 0 out of range for month field (1-12)", 6},
		{"* * * * 8", "value 8 out of range for day-of-week field (0-7)", 8},
		{"60 * * * * *", "value 60 out of range for second field (0-59)", 0},
		{"1,2,99 * * * *", "value 99 out of range for minute field (0-59)", 4},
		{"99999999999 * * * *",
		"value 99999999999 out of range for minute field (0-59)", 0},
		{"5-1 * * * *",
		"invalid range 5-1 in minute field: start is greater than end", 0},
		{"0 0 * * fri-mon",
		"invalid range fri-mon in day-of-week field: start is greater than end", 8},
		{"*/0 * * * *", "step must be greater than zero", 2},
		{"0 0 1-10/0 * *", "step must be greater than zero", 9},
		{"* */25 * * *", "step 25 out of range for hour field (1-24)", 4},
		{"*/ * * * *", "step must be a number in minute field", 2},
		{"1,,2 * * * *", "empty list element in minute field", 2},
		{"1, * * * *", "empty list element in minute field", 2},
		{"5x * * * *", "unexpected character \"x\" in minute field", 1},
		{"*5 * * * *", "unexpected character \"5\" in minute field", 1},
		{"1-2-3 * * * *", "unexpected character \"-\" in minute field", 3},
		{"* * * * 1#2", "unexpected character \"#\" in day-of-week field", 9},
		{"/5 * * * *", "unexpected character \"/\" in minute field", 0},
		{"1- * * * *", "missing value after \"-\" in minute field", 2},
		{"* * * foo *", "invalid month name \"foo\"", 6},
		{"* * * * funday", "invalid day-of-week name \"funday\"", 8},
		{"jan * * * *", "invalid value \"jan\" in minute field", 0},
		{"0 0 * mon *", "invalid month name \"mon\"", 6},
		{"@daly", "unknown macro \"@daly\"", 0},
		{"@daily x", "unexpected text after \"@daily\"", 7},
		{"every", "missing interval after \"every\"", 5},
		{"every 5", "missing time unit (seconds, minutes, hours or days)", 7},
		{"every 0 seconds", "interval must be greater than zero", 6},
		{"every 5 weeks",
		"unknown time unit \"weeks\" (use seconds, minutes, hours or days)", 8},
		{"every 5 minutes now", "unexpected text after interval", 16},
		{"every 367 days", "interval must be at most 366 days", 6},
		{"every 99999999999 s", "interval must be at most 366 days", 6},
		{"every 1.5 hours", "unexpected character \".\" in interval", 7},
		{"0 0 30 2 *", "no selected month has a day 30", 4},
		{"0 0 31 4,6,9,11 *", "no selected month has a day 31", 4},
		{"0 0 30,31 feb *",
		"no selected month has any of the selected days of month", 4},
		{"0 0 30 2 */2", "no selected month has a day 30", 4},
	};
	size_t		i;
	JfCronSchedule s;
	JfCronError e;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
	{
		bool		r = jf_cron_parse(bad[i].expr, &s, &e);

		CHECK(!r && strcmp(e.message, bad[i].message) == 0 &&
			  e.position == bad[i].position,
			  "\"%s\": got %s: \"%s\" at %d, want \"%s\" at %d", bad[i].expr,
			  r ? "accepted" : "rejected", e.message, e.position,
			  bad[i].message, bad[i].position);
	}
	CHECK(!jf_cron_parse(NULL, &s, &e) && strcmp(e.message, "schedule is empty") == 0,
		  "NULL input");
	CHECK(!jf_cron_parse("61 * * * *", &s, NULL), "NULL error struct");
	/* non-ASCII input is never copied raw into a message */
	CHECK(!jf_cron_parse("\xc3\xa9 * * * *", &s, &e) &&
		  strcmp(e.message, "unexpected character \"?\" in minute field") == 0,
		  "non-ASCII: %s", e.message);
}

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
			CHECK(false, "%s: \"%s\" rejected: %s", what, c[i].expr, e.message);
			continue;
		}
		r = jf_cron_next(&s, c[i].zone, T(c[i].after), &got);
		if (c[i].expect == NULL)
			CHECK(!r, "%s: \"%s\" after %s: expected none, got %s", what,
				  c[i].expr, c[i].after, fmt(got));
		else
			CHECK(r && got == T(c[i].expect),
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
		CHECK(jf_cron_next(&s, NULL, 0, &n) && n == 7, "interval at 0: %lld", (long long) n);
		CHECK(jf_cron_next(&s, NULL, -1, &n) && n == 0, "interval at -1: %lld", (long long) n);
		CHECK(jf_cron_next(&s, NULL, -8, &n) && n == -7, "interval at -8: %lld", (long long) n);
		jf_cron_parse("0 0 1 1 *", &s, NULL);
		CHECK(jf_cron_next(&s, NULL, T("1969-06-01 00:00:00"), &n) &&
			  n == T("1970-01-01 00:00:00"), "before the epoch: %s", fmt(n));
		CHECK(!jf_cron_next(&s, NULL, JF_CRON_MAX_TIME + 1, &n), "after beyond range");
		CHECK(!jf_cron_next(&s, NULL, JF_CRON_MIN_TIME - 1, &n), "after before range");
		CHECK(!jf_cron_next(&s, &failing_zone, 0, &n), "zone failure is reported");
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
				CHECK(n > t, "strictly after");
				t = n;
				k++;
			}
			CHECK(k == counts[i].expect, "\"%s\" fires %d times from %s to %s, want %d",
				  counts[i].expr, k, counts[i].from, counts[i].to, counts[i].expect);
		}
	}
}

static double
now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
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
	CHECK(!jf_cron_next(&s, NULL, T("2024-01-01 00:00:00"), &n), "Feb 30 in UTC");
	CHECK(!jf_cron_next(&s, &paris_zone, T("2024-01-01 00:00:00"), &n), "Feb 30 in Paris");
	CHECK(!jf_cron_next(&s, &noop_zone, T("2024-01-01 00:00:00"), &n), "Feb 30, noop zone");
	el = now_sec() - t0;
	printf("impossible schedule: 3 searches of %d years in %.1f us\n",
		   JF_CRON_HORIZON_YEARS, el * 1e6);
	CHECK(el < 0.5, "impossible schedules give up quickly (%.3f s)", el);

	jf_cron_parse("* * * * *", &s, NULL);
	s.hours = 0;
	CHECK(!jf_cron_next(&s, NULL, 0, &n), "empty hour mask");
	jf_cron_parse("* * * * *", &s, NULL);
	s.days = 0;
	s.weekdays = 0;
	CHECK(!jf_cron_next(&s, NULL, 0, &n), "no day at all");
	jf_cron_parse("0 0 31 * *", &s, NULL);
	s.months = 1u << 4;
	CHECK(!jf_cron_next(&s, NULL, 0, &n), "April 31");
}

/* ----------------------------------------------------------------
 *		Randomised cross-checks against brute force
 * ----------------------------------------------------------------
 */

/* Reference view of a schedule, built together with its text */
typedef struct RefSched
{
	bool		sec[60],
				min[60],
				hour[24],
				dom[32],
				mon[13],
				dow[8];
	bool		has_sec,
				dom_star,
				dow_star,
				hour_star;
} RefSched;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(uint32_t n)
{
	/* xorshift64*: reproducible across platforms */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t) ((rng_state * 0x2545f4914f6cdd1dull) >> 33) % n;
}

static const char *const mon_abbr[] = {"", "jan", "feb", "mar", "apr", "may", "jun",
"jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const dow_abbr[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

static void
put_value(char **p, int v, int field, bool range_end_after_start)
{
	if (field == 4 && rnd(3) == 0)
		*p += sprintf(*p, "%s", mon_abbr[v]);
	else if (field == 5 && rnd(3) == 0 && (v < 7 || range_end_after_start))
		*p += sprintf(*p, "%s", dow_abbr[v % 7]);
	else
		*p += sprintf(*p, "%d", v);
}

/*
 * Append a random field to *p and mark its values in set.  star_pct is the
 * chance of a field starting with '*'.  Returns whether it did.
 */
static bool
gen_field(char **p, bool *set, int field, int lo_lim, int hi_lim, int star_pct,
		  int focus_hi)
{
	int			nitems = 1 + (rnd(4) == 0) + (rnd(8) == 0);
	bool		star = (int) rnd(100) < star_pct;
	int			i,
				v;

	for (i = 0; i < nitems; i++)
	{
		int			lo,
					hi,
					step = 1,
					kind = (i == 0 && star) ? rnd(2) : 2 + rnd(4);
		int			span = hi_lim - lo_lim + 1;

		if (i > 0)
			*(*p)++ = ',';
		if (kind <= 1)
		{
			lo = lo_lim;
			hi = hi_lim;
			**p = '*';
			(*p)++;
			if (kind == 1)
			{
				step = 1 + rnd(rnd(2) ? 4 : span);
				*p += sprintf(*p, "/%d", step);
			}
		}
		else
		{
			/* focus_hi keeps values where the test needs them (DST hours) */
			lo = lo_lim + rnd((focus_hi ? focus_hi : hi_lim) - lo_lim + 1);
			hi = lo;
			put_value(p, lo, field, false);
			if (kind >= 3 && kind != 5)
			{
				hi = lo + rnd(hi_lim - lo + 1);
				*(*p)++ = '-';
				put_value(p, hi, field, lo > 0);
			}
			if (kind >= 4)
			{
				step = 1 + rnd(rnd(2) ? 5 : span);
				*p += sprintf(*p, "/%d", step);
				if (kind == 5)
					hi = hi_lim;
			}
		}
		for (v = lo; v <= hi; v += step)
			set[v] = true;
	}
	**p = '\0';
	return star;
}

/* Random 5- or 6-field expression; hour_focus > 0 keeps hours below it */
static void
gen_expr(char *buf, RefSched *r, bool seconds, int hour_star_pct, int hour_focus)
{
	char	   *p = buf;

	memset(r, 0, sizeof(*r));
	r->has_sec = seconds;
	if (seconds)
	{
		gen_field(&p, r->sec, 0, 0, 59, 60, 0);
		*p++ = ' ';
	}
	else
		r->sec[0] = true;
	gen_field(&p, r->min, 1, 0, 59, 50, 0);
	*p++ = ' ';
	r->hour_star = gen_field(&p, r->hour, 2, 0, 23, hour_star_pct, hour_focus);
	*p++ = ' ';
	r->dom_star = gen_field(&p, r->dom, 3, 1, 31, 65, 0);
	*p++ = ' ';
	gen_field(&p, r->mon, 4, 1, 12, 80, 0);
	*p++ = ' ';
	r->dow_star = gen_field(&p, r->dow, 5, 0, 7, 65, 0);
	if (r->dow[7])
		r->dow[0] = true;
}

static bool
ref_match(const RefSched *r, int64_t wall)
{
	time_t		tt = (time_t) wall;
	struct tm	tm;
	bool		dm,
				wm;

	gmtime_r(&tt, &tm);
	if (!r->sec[tm.tm_sec] || !r->min[tm.tm_min] || !r->hour[tm.tm_hour] ||
		!r->mon[tm.tm_mon + 1])
		return false;
	dm = r->dom[tm.tm_mday];
	wm = r->dow[tm.tm_wday];
	return (r->dom_star || r->dow_star) ? (dm && wm) : (dm || wm);
}

/* UTC brute force: first matching second (or minute) in (after, after+window] */
static bool
ref_next_utc(const RefSched *r, int64_t after, int64_t window, int64_t *out)
{
	int64_t		step = r->has_sec ? 1 : 60;
	int64_t		t = after + 1;

	if (!r->has_sec)
		t = ((after + 60) / 60) * 60;	/* test dates are after 1970 */
	for (; t <= after + window; t += step)
		if (ref_match(r, t))
		{
			*out = t;
			return true;
		}
	return false;
}

/*
 * Zone brute force, written from the rules in cron.h rather than from the
 * code: elapsed-time schedules fire at each real minute whose wall clock
 * matches; fixed-time ones fire each matching wall time once, at its
 * earliest real instant, or at wall - standard offset when it falls in a
 * spring-forward gap (northern zones: the offset before a gap is std).
 */
static bool
ref_next_zone(const RefSched *r, RuleZone *z, const JfCronZone *zone,
			  int64_t after, int64_t window, int64_t *out)
{
	int64_t		best = JF_CRON_NEVER;
	int64_t		t,
				L,
				L0;

	if (r->hour_star)
	{
		for (t = ((after + 60) / 60) * 60; t <= after + window; t += 60)
			if (ref_match(r, t + zone_offset(zone, t)))
			{
				*out = t;
				return true;
			}
		return false;
	}
	L0 = ((after + zone_offset(zone, after)) / 60) * 60 - 86400;
	for (L = L0; L <= L0 + window + 3 * 86400; L += 60)
	{
		int64_t		m = JF_CRON_NEVER;

		if (!ref_match(r, L))
			continue;
		if (zone_offset(zone, L - z->dst) == z->dst)
			m = L - z->dst;
		if (zone_offset(zone, L - z->std) == z->std && L - z->std < m)
			m = L - z->std;
		if (m == JF_CRON_NEVER)
			m = L - z->std;		/* in the gap */
		if (m > after && m < best)
			best = m;
	}
	if (best > after + window)
		return false;
	*out = best;
	return true;
}

static void
test_random_utc(void)
{
	int			i,
				mismatches = 0,
				compared = 0;

	for (i = 0; i < 1600; i++)
	{
		char		buf[256];
		RefSched	r;
		JfCronSchedule s;
		JfCronError e;
		bool		seconds = (i % 4 == 0);
		int64_t		window = seconds ? 2 * 3600 : 3 * 86400;
		int64_t		after = T("2000-01-01 00:00:00") + (int64_t) rnd(40 * 365) * 86400 +
			rnd(86400);
		int			k;

		gen_expr(buf, &r, seconds, 50, 0);
		if (!jf_cron_parse(buf, &s, &e))
		{
			/* only "never fires" may be refused */
			CHECK(strncmp(e.message, "no selected month", 17) == 0,
				  "random \"%s\" rejected: %s at %d", buf, e.message, e.position);
			continue;
		}
		/* a chain of successive occurrences, each strictly after the last */
		for (k = 0; k < 4; k++)
		{
			int64_t		want = 0,
						got = 0,
						got2 = 0;
			bool		have = ref_next_utc(&r, after, window, &want);
			bool		r1 = jf_cron_next(&s, NULL, after, &got);
			bool		r2 = jf_cron_next(&s, &noop_zone, after - 3600, &got2);

			compared++;
			/* noop zone is a constant +1h announced as changing every 6h */
			if (r1 != r2 || (r1 && got2 != got - 3600))
			{
				mismatches++;
				printf("random \"%s\" after %s: UTC %s, +1h noop zone %s\n",
					   buf, fmt(after), r1 ? fmt(got) : "none",
					   r2 ? fmt(got2) : "none");
			}
			if (have ? !(r1 && got == want) : (r1 && got <= after + window))
			{
				mismatches++;
				if (mismatches < 10)
					printf("random \"%s\" after %s: want %s got %s\n", buf,
						   fmt(after), have ? fmt(want) : "none",
						   r1 ? fmt(got) : "none");
				break;
			}
			if (!have)
				break;
			after = want;
		}
	}
	CHECK(mismatches == 0, "random UTC cross-check: %d mismatches in %d", mismatches,
		  compared);
	printf("random UTC cross-check: %d comparisons\n", compared);
}

static void
test_random_dst(void)
{
	int			i,
				mismatches = 0,
				compared = 0;

	for (i = 0; i < 600; i++)
	{
		char		buf[256];
		RefSched	r;
		JfCronSchedule s;
		JfCronError e;
		bool		ny = i % 2;
		RuleZone   *z = ny ? &newyork : &paris;
		const JfCronZone *zone = ny ? &ny_zone : &paris_zone;
		int			year = 2000 + rnd(38);
		int64_t		tr = z->trans[2 * (year - 1900) + rnd(2)];
		int64_t		after = tr - 2 * 86400 + rnd(4 * 86400);
		int64_t		window = 2 * 86400;
		int			k;

		/* hours near the change (Paris 01-03 local, New York 00-03) */
		gen_expr(buf, &r, false, 40, 4);
		if (!jf_cron_parse(buf, &s, &e))
			continue;
		for (k = 0; k < 6; k++)
		{
			int64_t		want = 0,
						got = 0;
			bool		have = ref_next_zone(&r, z, zone, after, window, &want);
			bool		r1 = jf_cron_next(&s, zone, after, &got);

			compared++;
			if (have ? !(r1 && got == want) : (r1 && got <= after + window))
			{
				mismatches++;
				if (mismatches < 10)
					printf("random %s \"%s\" after %s: want %s got %s\n",
						   ny ? "NY" : "Paris", buf, fmt(after),
						   have ? fmt(want) : "none", r1 ? fmt(got) : "none");
				break;
			}
			if (!have)
				break;
			after = want;
		}
	}
	CHECK(mismatches == 0, "random DST cross-check: %d mismatches in %d", mismatches,
		  compared);
	printf("random DST cross-check: %d comparisons\n", compared);
}

/*
 * Random junk from cron's alphabet: whatever the parser says must be
 * coherent (a message and an in-range position, or a schedule that fires).
 */
static void
test_parse_fuzz(void)
{
	static const char alphabet[] = "0123456789*/-,  \t@abcdefjmnorstuvwy";
	int			i,
				bad = 0,
				accepted = 0;

	for (i = 0; i < 50000; i++)
	{
		char		buf[40];
		int			len = rnd(sizeof(buf) - 1),
					j;
		JfCronSchedule s;
		JfCronError e;
		int64_t		n;

		/* half the time start from a valid shape and damage it */
		if (i % 2)
		{
			strcpy(buf, "*/5 1-3 * jan-mar mon");
			len = (int) strlen(buf);
			for (j = rnd(3) + 1; j > 0; j--)
				buf[rnd(len)] = alphabet[rnd(sizeof(alphabet) - 1)];
		}
		else
		{
			for (j = 0; j < len; j++)
				buf[j] = alphabet[rnd(sizeof(alphabet) - 1)];
			buf[len] = '\0';
		}
		if (jf_cron_parse(buf, &s, &e))
		{
			accepted++;
			if (!jf_cron_next(&s, NULL, T("2024-01-01 00:00:00"), &n))
				bad++, printf("accepted \"%s\" never fires\n", buf);
		}
		else if (e.message[0] == '\0' || e.position < 0 || e.position > len)
			bad++, printf("\"%s\": \"%s\" at %d\n", buf, e.message, e.position);
	}
	CHECK(bad == 0, "parser fuzz: %d incoherent answers", bad);
	printf("parser fuzz: %d of 50000 accepted\n", accepted);
}

/* ----------------------------------------------------------------
 *		Speed (printed, not asserted)
 * ----------------------------------------------------------------
 */

static void
bench(const char *expr, const JfCronZone *zone, const char *zname)
{
	JfCronSchedule s;
	int64_t		t = T("2024-01-01 00:00:00"),
				n = 0,
				sum = 0;
	int			i,
				iters = 200000;
	double		t0,
				el;

	jf_cron_parse(expr, &s, NULL);
	t0 = now_sec();
	for (i = 0; i < iters; i++)
	{
		/* jump around the year so calls are not all alike */
		jf_cron_next(&s, zone, t + (int64_t) (i % 997) * 31337, &n);
		sum += n;
	}
	el = now_sec() - t0;
	printf("bench %-22s %-6s %6.0f ns/call%s\n", expr, zname, el / iters * 1e9,
		   sum == 0 ? " " : "");
}

int
main(void)
{
	rule_zone_init(&paris);
	rule_zone_init(&newyork);

	test_parse_valid();
	test_parse_invalid();
	test_next_utc();
	test_next_dst();
	test_impossible();
	test_random_utc();
	test_random_dst();
	test_parse_fuzz();

	bench("*/5 * * * *", NULL, "UTC");
	bench("30 2 * * *", NULL, "UTC");
	bench("0 9 * * mon-fri", &paris_zone, "Paris");
	bench("*/15 * * * *", &paris_zone, "Paris");
	bench("0 0 1 1 *", &ny_zone, "NY");
	bench("*/10 * * * * *", NULL, "UTC");
	bench("0 0 29 2 *", NULL, "UTC");
	bench("every 10 seconds", NULL, "UTC");

	printf("test_cron: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
