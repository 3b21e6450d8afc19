/*-------------------------------------------------------------------------
 *
 * test_cron_parse.c
 *	  Unit tests for src/cron.c: parsing cron expressions.
 *
 * Accepted forms (fields, ranges, steps, names, shortcuts, seconds,
 * "every N units") and rejected ones with their exact message and
 * position.  Next occurrences are test_cron_next.c; randomised
 * cross-checks and the parser fuzz are test_cron_random.c.
 *
 *-------------------------------------------------------------------------
 */
#include "core/cron.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "unit.h"

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
		CHECKF(jf_cron_parse(ok[i], &s, &e), "\"%s\" rejected: %s at %d",
			  ok[i], e.message, e.position);

	/* field contents */
	jf_cron_parse("1,2,5 * * * *", &s, &e);
	CHECKF(s.minutes == ((1ull << 1) | (1ull << 2) | (1ull << 5)), "list");
	CHECKF(s.seconds == 1, "no seconds field means second 0");
	CHECKF(s.hours == 0xffffff && s.days == 0xfffffffe && s.months == 0x1ffe &&
		  s.weekdays == 0x7f, "stars");
	CHECKF((s.flags & (JF_CRON_HOUR_STAR | JF_CRON_DOM_STAR | JF_CRON_DOW_STAR)) ==
		  (JF_CRON_HOUR_STAR | JF_CRON_DOM_STAR | JF_CRON_DOW_STAR), "star flags");
	jf_cron_parse("5-40/5 * * * *", &s, &e);
	{
		uint64_t	m = 0;
		int			v;

		for (v = 5; v <= 40; v += 5)
			m |= 1ull << v;
		CHECKF(s.minutes == m, "range with step");
	}
	jf_cron_parse("5/15 * * * *", &s, &e);
	CHECKF(s.minutes == ((1ull << 5) | (1ull << 20) | (1ull << 35) | (1ull << 50)),
		  "N/step means N-max/step");
	jf_cron_parse("*/10 * * * *", &s, &e);
	CHECKF(s.minutes == ((1ull << 0) | (1ull << 10) | (1ull << 20) | (1ull << 30) |
						(1ull << 40) | (1ull << 50)), "*/10");
	jf_cron_parse("0 0 * * 7", &s, &e);
	CHECKF(s.weekdays == 1, "7 is Sunday");
	jf_cron_parse("0 0 * * mon-sun", &s, &e);
	CHECKF(s.weekdays == 0x7f, "mon-sun is the whole week");
	jf_cron_parse("0 0 * * sun-sun", &s, &e);
	CHECKF(s.weekdays == 1, "sun-sun is Sunday only");
	jf_cron_parse("0 0 * * fri-sun", &s, &e);
	CHECKF(s.weekdays == ((1 << 5) | (1 << 6) | 1), "fri-sun");
	jf_cron_parse("0 0 * JAN-Mar,Dec *", &s, &e);
	CHECKF(s.months == ((1 << 1) | (1 << 2) | (1 << 3) | (1 << 12)), "month names");
	jf_cron_parse("0 0 * * Monday,friday", &s, &e);
	CHECKF(s.weekdays == ((1 << 1) | (1 << 5)), "full day names");
	jf_cron_parse("0 0 13 * 5", &s, &e);
	CHECKF((s.flags & (JF_CRON_DOM_STAR | JF_CRON_DOW_STAR)) == 0 &&
		  !(s.flags & JF_CRON_HOUR_STAR), "restricted flags");
	jf_cron_parse("0 */2 * * *", &s, &e);
	CHECKF(s.flags & JF_CRON_HOUR_STAR, "hour step is a wildcard hour");
	jf_cron_parse("0 0-23 * * *", &s, &e);
	CHECKF(!(s.flags & JF_CRON_HOUR_STAR), "explicit 0-23 is a fixed hour");
	jf_cron_parse("*/10 * * * * *", &s, &e);
	CHECKF(s.seconds == ((1ull << 0) | (1ull << 10) | (1ull << 20) |
						(1ull << 30) | (1ull << 40) | (1ull << 50)) &&
		  s.minutes == 0x0fffffffffffffffull && (s.flags & JF_CRON_HAS_SECONDS),
		  "seconds field");

	/* macros expand to their 5-field forms */
	jf_cron_parse("@yearly", &s, &e);
	jf_cron_parse("0 0 1 1 *", &t, &e);
	CHECKF(memcmp(&s, &t, sizeof(s)) == 0, "@yearly");
	jf_cron_parse("@weekly", &s, &e);
	jf_cron_parse("0 0 * * 0", &t, &e);
	CHECKF(memcmp(&s, &t, sizeof(s)) == 0, "@weekly");
	jf_cron_parse("@hourly", &s, &e);
	jf_cron_parse("0 * * * *", &t, &e);
	CHECKF(memcmp(&s, &t, sizeof(s)) == 0, "@hourly");

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
			/* pg_cron's spelling, without "every" */
			{"5 seconds", 5}, {"10 minutes", 600}, {" 2 hours ", 7200}, {"30s", 30},
			{"1 day", 86400},
		};

		for (i = 0; i < sizeof(iv) / sizeof(iv[0]); i++)
		{
			bool		r = jf_cron_parse(iv[i].expr, &s, &e);

			CHECKF(r && (s.flags & JF_CRON_INTERVAL) && s.interval == iv[i].secs,
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
		{"5 weeks", "unknown time unit \"weeks\" (use seconds, minutes, hours or days)", 2},
		{"0 seconds", "interval must be greater than zero", 0},
		{"5 4", "expected 5 or 6 fields, found 2", 3},
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

		CHECKF(!r && strcmp(e.message, bad[i].message) == 0 &&
			  e.position == bad[i].position,
			  "\"%s\": got %s: \"%s\" at %d, want \"%s\" at %d", bad[i].expr,
			  r ? "accepted" : "rejected", e.message, e.position,
			  bad[i].message, bad[i].position);
	}
	CHECKF(!jf_cron_parse(NULL, &s, &e) && strcmp(e.message, "schedule is empty") == 0,
		  "NULL input");
	CHECKF(!jf_cron_parse("61 * * * *", &s, NULL), "NULL error struct");
	/* non-ASCII input is never copied raw into a message */
	CHECKF(!jf_cron_parse("\xc3\xa9 * * * *", &s, &e) &&
		  strcmp(e.message, "unexpected character \"?\" in minute field") == 0,
		  "non-ASCII: %s", e.message);
}

int
main(void)
{
	test_parse_valid();
	test_parse_invalid();

	return unit_done("test_cron_parse");
}
