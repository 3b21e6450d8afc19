/*-------------------------------------------------------------------------
 *
 * cron.h
 *	  Cron expression parser and next-occurrence computation for jobflow.
 *
 * Plain C, no PostgreSQL headers: the backend validates a schedule with
 * jf_cron_parse() (its error carries a message in errmsg style and the
 * 0-based byte offset of the problem) and computes fire times with
 * jf_cron_next().  Time zones are abstract: the caller supplies a JfCronZone
 * whose single callback reports the UTC offset in force at an instant and
 * the next instant at which it changes.  That is exactly what PostgreSQL's
 * pg_next_dst_boundary() returns, so the backend plugs pg_tz in directly;
 * jf_cron_zone_utc is provided ready-made.
 *
 * Accepted syntax (case-insensitive, any amount of blanks between fields):
 *
 *	  [second] minute hour day-of-month month day-of-week
 *		second 0-59, minute 0-59, hour 0-23, day-of-month 1-31,
 *		month 1-12 or jan-dec, day-of-week 0-7 or sun-sat (0 and 7 = Sunday)
 *		each field is a comma list of:  *   N   N-M   * /S   N-M/S   N/S
 *		(N/S means N-max/S); names may be 3-letter or full ("mon", "monday");
 *		("* /S" is written with a blank here only to keep this comment open)
 *	  @yearly @annually @monthly @weekly @daily @midnight @hourly
 *	  every N unit     unit: s sec(s) second(s) m min(s) minute(s)
 *					   h hr(s) hour(s) d day(s); "every minute" means N = 1
 *	  N unit           the same as "every N unit" (pg_cron's "5 seconds")
 *
 * Day matching follows Vixie cron: if both day-of-month and day-of-week are
 * restricted (neither field starts with '*'), a day matches when EITHER
 * matches; otherwise both must match.  Schedules that can never fire
 * (e.g. "0 0 30 2 *") are rejected by jf_cron_parse.
 *
 * Time-zone and DST rules implemented by jf_cron_next:
 *
 *	- "every N unit" schedules are absolute: occurrences are the multiples
 *	  of N seconds since 1970-01-01 00:00:00 UTC; the zone is ignored.
 *
 *	- Elapsed-time schedules: the hour field starts with '*' (e.g.
 *	  "* /15 * * * *", "0 * * * *", @hourly).  An instant fires when the
 *	  local wall clock at that instant matches.  Through a spring-forward gap
 *	  the skipped wall times simply do not occur; through a fall-back
 *	  overlap the repeated wall times fire twice (once per pass), so such a
 *	  job keeps firing at its real elapsed-time rhythm.
 *
 *	- Fixed-time schedules: every other cron expression (hour field is a
 *	  number, list or range, e.g. "30 2 * * *", @daily).  Each matching wall
 *	  time fires exactly once:
 *		* a wall time repeated by a fall-back fires at its FIRST occurrence
 *		  (the earlier UTC instant) only;
 *		* a wall time skipped by a spring-forward fires at the instant the
 *		  clock would have shown it had the old offset continued, i.e. it is
 *		  shifted later by the size of the gap: with 02:00 -> 03:00, a 02:30
 *		  job runs at 03:30 new time (RFC 5545 / JavaScript Temporal
 *		  "compatible" disambiguation).  If that instant coincides with
 *		  another occurrence it fires only once.
 *
 *	- jf_cron_next returns the first occurrence strictly after after_utc_sec.
 *	  It returns false when there is none within JF_CRON_HORIZON_YEARS (only
 *	  hand-built schedules can be impossible; every schedule jf_cron_parse
 *	  accepts fires at least once in any 40-year span: Feb 29 on a given
 *	  weekday), when after_utc_sec is outside [JF_CRON_MIN_TIME,
 *	  JF_CRON_MAX_TIME], or when the zone callback fails or misbehaves
 *	  (offset of a day or more, next change not after the instant asked,
 *	  more than 131072 changes announced before the answer).
 *
 * Cost: fields are skipped with bit operations (next matching month, day,
 * hour, minute, second), never scanned second by second; one zone callback
 * per constant-offset stretch crossed (usually one or two).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_CRON_H
#define JF_CRON_H

#include <stdbool.h>
#include <stdint.h>

/* JfCronSchedule.flags */
#define JF_CRON_DOM_STAR	0x01	/* day-of-month field starts with '*' */
#define JF_CRON_DOW_STAR	0x02	/* day-of-week field starts with '*' */
#define JF_CRON_HOUR_STAR	0x04	/* hour field starts with '*': elapsed time */
#define JF_CRON_INTERVAL	0x08	/* "every N unit": use interval only */
#define JF_CRON_HAS_SECONDS	0x10	/* a seconds field was given */

/*
 * A parsed schedule: plain data, safe to copy with memcpy or store as bytes.
 * Bit i of a mask set means value i matches.
 */
typedef struct JfCronSchedule
{
	uint64_t	seconds;		/* bits 0-59 (bit 0 only without seconds field) */
	uint64_t	minutes;		/* bits 0-59 */
	int64_t		interval;		/* seconds, when JF_CRON_INTERVAL */
	uint32_t	hours;			/* bits 0-23 */
	uint32_t	days;			/* bits 1-31 */
	uint16_t	months;			/* bits 1-12 */
	uint8_t		weekdays;		/* bits 0-6, Sunday = 0 */
	uint8_t		flags;			/* JF_CRON_* above */
} JfCronSchedule;

/*
 * Parse error: message in PostgreSQL errmsg style (lower case, no final
 * period; quoted input is cut to 24 bytes and non-ASCII bytes shown as '?').
 * position is the 0-based BYTE offset of the problem in the input; for
 * errposition() convert it with pg_mbstrlen_with_len(expr, position) + 1.
 */
typedef struct JfCronError
{
	char		message[128];
	int			position;
} JfCronError;

/*
 * Zone callback: report the offset (seconds east of UTC) in force at
 * utc_sec, and the first instant strictly after utc_sec at which the offset
 * may change (*next_change, or JF_CRON_NEVER if it never changes again)
 * together with the offset from that instant on (*next_gmtoff).  Spurious
 * "changes" to the same offset are allowed.  Return false on failure.
 * With pg_tz this is one call to pg_next_dst_boundary().
 */
typedef bool (*JfCronZoneLookup) (void *arg, int64_t utc_sec,
								  int32_t *gmtoff, int64_t *next_change,
								  int32_t *next_gmtoff);

typedef struct JfCronZone
{
	JfCronZoneLookup lookup;
	void	   *arg;
} JfCronZone;

#define JF_CRON_NEVER			INT64_MAX
#define JF_CRON_HORIZON_YEARS	50
/* accepted range of after_utc_sec: 0001-01-01 .. 9999-12-31 23:59:59 UTC */
#define JF_CRON_MIN_TIME		INT64_C(-62135596800)
#define JF_CRON_MAX_TIME		INT64_C(253402300799)

extern const JfCronZone jf_cron_zone_utc;

/*
 * Parse expr into *out.  On failure returns false and, if err is not NULL,
 * fills it; *out is then unspecified.
 */
extern bool jf_cron_parse(const char *expr, JfCronSchedule *out,
						  JfCronError *err);

/*
 * First occurrence strictly after after_utc_sec, as Unix seconds (UTC), in
 * the given zone (NULL means UTC).  See the rules above.
 */
extern bool jf_cron_next(const JfCronSchedule *s, const JfCronZone *zone,
						 int64_t after_utc_sec, int64_t *next_utc_sec);

#endif							/* JF_CRON_H */
