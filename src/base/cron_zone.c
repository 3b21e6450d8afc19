/*-------------------------------------------------------------------------
 *
 * cron_zone.c
 *	  Cron schedules in PostgreSQL's time zones: the plain-C parser and
 *	  next-occurrence search (core/cron.c) plugged into pg_tz, with errors
 *	  in PostgreSQL's style.
 *
 * Parsing and next-occurrence arithmetic live in the plain-C core/cron.c;
 * this file plugs PostgreSQL's own time-zone library into it (pg_tzset()
 * for the name, pg_next_dst_boundary() for the offsets), so timers follow
 * the server's tzdata and never the process's TZ.  The timers' trigger
 * and cron_next() (api/cron.c) and the worker's materialiser
 * (worker/cron.c) use it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>

#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "base/cron_zone.h"

/* Seconds between the Unix epoch and PostgreSQL's (2000-01-01). */
#define CRON_EPOCH_DIFF_S \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY)

static const char *const cron_syntax_hint =
"A schedule is 5 or 6 cron fields ([second] minute hour day-of-month month day-of-week), "
"a macro such as @hourly, or an interval such as \"every 10 seconds\".";

/*
 * The JfCronZone callback over pg_tz.  pg_next_dst_boundary reports every
 * transition of the zone (not only isdst changes), strictly after t;
 * anything else is refused rather than trusted.
 */
static bool
pgtz_lookup(void *arg, int64_t utc_sec, int32_t *gmtoff, int64_t *next_change,
			int32_t *next_gmtoff)
{
	pg_time_t	t = (pg_time_t) utc_sec;
	long		before_off;
	long		after_off;
	int			before_dst;
	int			after_dst;
	pg_time_t	boundary;
	int			r;

	r = pg_next_dst_boundary(&t, &before_off, &before_dst, &boundary,
							 &after_off, &after_dst, (const pg_tz *) arg);
	if (r < 0)
		return false;
	*gmtoff = (int32_t) before_off;
	if (r == 0)
	{
		*next_change = JF_CRON_NEVER;
		*next_gmtoff = (int32_t) before_off;
		return true;
	}
	if (boundary <= t)
		return false;
	*next_change = boundary;
	*next_gmtoff = (int32_t) after_off;
	return true;
}

/*
 * Parse or fail with the parser's message and where the problem is.
 * errposition() points into the query text, not into a string argument,
 * so the character number goes in the detail.
 */
void
jf_cron_parse_sql(const char *expr, JfCronSchedule *s)
{
	JfCronError err;

	if (jf_cron_parse(expr, s, &err))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid cron schedule: %s", err.message),
			 errdetail("The error is at character %d of the schedule.",
					   pg_mbstrlen_with_len(expr, err.position) + 1),
			 errhint("%s", cron_syntax_hint)));
}

/* A zone name is echoed only when it cannot carry odd bytes into the log. */
static bool
printable_name(const char *name)
{
	const char *p;

	if (strlen(name) > 64)
		return false;
	for (p = name; *p; p++)
	{
		if ((unsigned char) *p < 0x20 || (unsigned char) *p >= 0x7f)
			return false;
	}
	return true;
}

/*
 * PostgreSQL's zone of that name, as SET TIME ZONE would find it.  Leap
 * second zones are refused as the server refuses them for timezone.  So
 * are zones whose offset from UTC is a day or more: a POSIX rule such as
 * "<+99>-99" parses, but no wall clock of it maps to an instant the walk
 * in cron.c accepts, so a timer in it would never fire.
 */
pg_tz *
jf_cron_lookup_zone(const char *name)
{
	pg_tz	   *tz = pg_tzset(name);
	int32_t		off;
	int32_t		next_off;
	int64_t		next_change;

	if (tz == NULL || !pg_tz_acceptable(tz))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 printable_name(name) ?
				 errmsg("time zone \"%s\" not recognized", name) :
				 errmsg("time zone not recognized"),
				 errhint("Use a name from pg_timezone_names, for example \"Europe/Paris\" or \"UTC\".")));
	if (!pgtz_lookup(tz, (int64_t) time(NULL), &off, &next_change, &next_off) ||
		off <= -SECS_PER_DAY || off >= SECS_PER_DAY ||
		next_off <= -SECS_PER_DAY || next_off >= SECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 printable_name(name) ?
				 errmsg("time zone \"%s\" has an offset from UTC of a day or more", name) :
				 errmsg("time zone has an offset from UTC of a day or more"),
				 errdetail("No wall-clock time of such a zone can be scheduled."),
				 errhint("Use a name from pg_timezone_names, for example \"Europe/Paris\" or \"UTC\".")));
	return tz;
}

/*
 * First occurrence strictly after "after", in whole seconds.  False when
 * there is none that a timestamptz can hold.
 */
bool
jf_cron_next_occurrence(const JfCronSchedule *s, pg_tz *tz, TimestampTz after,
				TimestampTz *next)
{
	JfCronZone	zone = {pgtz_lookup, tz};
	int64		sec;
	int64_t		next_sec;

	if (TIMESTAMP_NOT_FINITE(after))
		return false;
	/* floor division: the second that contains "after" */
	sec = after / USECS_PER_SEC;
	if (after < 0 && sec * USECS_PER_SEC != after)
		sec--;
	sec += CRON_EPOCH_DIFF_S;
	if (sec < JF_CRON_MIN_TIME || sec > JF_CRON_MAX_TIME)
		return false;
	if (!jf_cron_next(s, &zone, sec, &next_sec))
		return false;
	*next = (TimestampTz) (next_sec - CRON_EPOCH_DIFF_S) * USECS_PER_SEC;
	return true;
}
