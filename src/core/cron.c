/*-------------------------------------------------------------------------
 *
 * cron.c
 *	  Next occurrence of a parsed cron schedule, in any time zone.
 *
 * Finding the next matching value of a field is a mask shift plus
 * count-trailing-zeros.  The search runs on "local seconds": local wall
 * time written as if it were UTC, which makes calendar arithmetic exact and
 * zone independent.  Time zones enter only through the offset callback: the
 * UTC timeline is walked in stretches of constant offset, inside which
 * local = utc + offset is a straight line, and the DST rules of cron.h are
 * applied at the joins between stretches.  Parsing is in cron_parse.c.
 *
 * No allocation, no global state, no output: the module can be linked into a
 * backend as is.
 *
 *-------------------------------------------------------------------------
 */
#include "core/cron_internal.h"

#include <string.h>

static bool
zone_utc_lookup(void *arg, int64_t utc_sec, int32_t *gmtoff,
				int64_t *next_change, int32_t *next_gmtoff)
{
	(void) arg;
	(void) utc_sec;
	*gmtoff = 0;
	*next_change = JF_CRON_NEVER;
	*next_gmtoff = 0;
	return true;
}

const JfCronZone jf_cron_zone_utc = {zone_utc_lookup, NULL};

/* ----------------------------------------------------------------
 *		Calendar arithmetic on "local seconds"
 *
 * Proleptic Gregorian calendar, day 0 = 1970-01-01, valid for negative
 * values too (floor division throughout).
 * ----------------------------------------------------------------
 */

static int64_t
floor_div(int64_t a, int64_t b)
{
	int64_t		q = a / b;

	return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t
days_from_civil(int64_t y, int m, int d)
{
	int64_t		era,
				yoe,
				doy,
				doe;

	y -= (m <= 2);
	era = floor_div(y, 400);
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static void
civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	int64_t		era,
				doe,
				yoe,
				doy,
				mp;

	z += 719468;
	era = floor_div(z, 146097);
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (int) (doy - (153 * mp + 2) / 5 + 1);
	*m = (int) (mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

/*
 * Days of the month starting on day number first_day that match, as bits
 * 1..dim.  The weekday mask is repeated every 7 bits so that one shift lines
 * it up with the month's first weekday.
 */
static uint32_t
month_day_mask(const JfCronSchedule *s, int64_t first_day, int dim)
{
	uint64_t	w = s->weekdays;
	uint64_t	rep = w | (w << 7) | (w << 14) | (w << 21) | (w << 28) | (w << 35);
	int			w0 = (int) (first_day - floor_div(first_day + 4, 7) * 7 + 4) % 7;
	uint32_t	dow = (uint32_t) ((rep >> w0) << 1);
	uint32_t	m;

	if (s->flags & (JF_CRON_DOM_STAR | JF_CRON_DOW_STAR))
		m = s->days & dow;
	else
		m = s->days | dow;
	return m & (((UINT32_C(1) << dim) - 1) << 1);
}

/*
 * First local time >= from and < limit whose fields all match.  Each level
 * jumps to its next matching value and resets the finer levels, so the cost
 * is a few bit operations per month, day, hour and minute visited, and the
 * month loop is bounded by limit.
 */
static bool
find_local(const JfCronSchedule *s, int64_t from, int64_t limit, int64_t *out)
{
	int64_t		day = floor_div(from, SECS_PER_DAY);
	int			sod = (int) (from - day * SECS_PER_DAY);
	int64_t		y;
	int			m,
				d,
				h = sod / 3600,
				mi = sod / 60 % 60,
				sec = sod % 60;

	if (from >= limit)
		return false;
	civil_from_days(day, &y, &m, &d);
	for (;;)
	{
		int64_t		first_day;
		uint32_t	dmask;

		if (!(s->months & (1u << m)))
		{
			uint32_t	later = (uint32_t) s->months & (~0u << m);

			if (later)
				m = __builtin_ctz(later);
			else
			{
				y++;
				m = __builtin_ctz(s->months);
			}
			d = 1;
			h = mi = sec = 0;
		}
		first_day = days_from_civil(y, m, 1);
		if (first_day * SECS_PER_DAY >= limit)
			return false;
		dmask = month_day_mask(s, first_day, jf_cron_days_in_month(y, m)) & (~0u << d);
		while (dmask)
		{
			int			nd = __builtin_ctz(dmask);
			uint32_t	hmask;

			if (nd != d)
			{
				d = nd;
				h = mi = sec = 0;
			}
			hmask = s->hours & (~0u << h);
			while (hmask)
			{
				int			nh = __builtin_ctz(hmask);
				uint64_t	mmask;

				if (nh != h)
				{
					h = nh;
					mi = sec = 0;
				}
				mmask = s->minutes & (~UINT64_C(0) << mi);
				while (mmask)
				{
					int			nmi = __builtin_ctzll(mmask);
					uint64_t	smask;

					if (nmi != mi)
					{
						mi = nmi;
						sec = 0;
					}
					smask = s->seconds & (~UINT64_C(0) << sec);
					if (smask)
					{
						int64_t		t;

						sec = __builtin_ctzll(smask);
						t = (first_day + d - 1) * SECS_PER_DAY +
							h * 3600 + mi * 60 + sec;
						if (t >= limit)
							return false;
						*out = t;
						return true;
					}
					mmask &= mmask - 1;
				}
				hmask &= hmask - 1;
			}
			dmask &= dmask - 1;
		}
		/* nothing left this month */
		if (++m > 12)
		{
			m = 1;
			y++;
		}
		d = 1;
		h = mi = sec = 0;
	}
}

/* ----------------------------------------------------------------
 *		Next occurrence
 * ----------------------------------------------------------------
 */

/* Ask the zone, refusing answers that would break the walk's termination */
static bool
zone_lookup(const JfCronZone *zone, int64_t t, int32_t *off, int64_t *next,
			int32_t *next_off)
{
	if (!zone->lookup(zone->arg, t, off, next, next_off))
		return false;
	if (*off <= -SECS_PER_DAY || *off >= SECS_PER_DAY ||
		*next_off <= -SECS_PER_DAY || *next_off >= SECS_PER_DAY || *next <= t)
		return false;
	return true;
}

/*
 * Bound on zone lookups per call, so that a zone announcing absurdly many
 * changes cannot stall a caller.  Real zones change about twice a year (a
 * hundred stretches over the horizon); a test zone announcing a no-op change
 * every 6 hours needs 73,000.
 */
#define MAX_STRETCHES	(1 << 17)

/*
 * Elapsed-time rule: an instant fires if its own wall clock matches.  Within
 * a stretch [u, end) of constant offset o the wall clock is u + o, so the
 * first match is one local search; stretches are disjoint and in order, so
 * the first hit is the answer.
 */
static bool
next_elapsed(const JfCronSchedule *s, const JfCronZone *zone, int64_t after,
			 int64_t horizon, int64_t *next)
{
	int64_t		u = after + 1;
	int			n;

	for (n = 0; n < MAX_STRETCHES && u <= horizon; n++)
	{
		int32_t		o,
					no;
		int64_t		end,
					L;

		if (!zone_lookup(zone, u, &o, &end, &no))
			return false;
		if (end > horizon)
			end = horizon;
		if (find_local(s, u + o, end + o, &L))
		{
			*next = L - o;
			return true;
		}
		u = end;
		if (u == horizon)
			break;
	}
	return false;
}

/*
 * Fixed-time rule: every matching wall time fires once, at its first real
 * instant, or, for a wall time inside a spring-forward gap, at wall - old
 * offset.  So each stretch [u, end) with offset o owns the wall times
 * [u + o, end + max(o, o_next)) (its own, plus the gap that follows it), minus
 * those an earlier stretch already owned (the repeated hour after a
 * fall-back).  A gap's wall times map past end, possibly after some of the
 * next stretch's own occurrences, so the walk keeps the best candidate and
 * goes on while a later stretch could still beat it.
 *
 * The walk starts one day before "after", which is more than any offset
 * change: that way it sees the fall-back preceding "after" and does not fire
 * a repeated wall time again.
 */
static bool
next_fixed(const JfCronSchedule *s, const JfCronZone *zone, int64_t after,
		   int64_t horizon, int64_t *next)
{
	int64_t		u = after + 1 - SECS_PER_DAY;
	int64_t		best = JF_CRON_NEVER;
	int64_t		owned = INT64_MIN;	/* wall times below this are taken */
	int			n;

	for (n = 0; n < MAX_STRETCHES && u <= horizon && u < best; n++)
	{
		int32_t		o,
					no;
		int64_t		end,
					lo,
					hi,
					L;

		if (!zone_lookup(zone, u, &o, &end, &no))
			return false;
		if (end >= horizon)
		{
			end = horizon;
			no = o;
		}
		lo = u + o;
		if (lo < owned)
			lo = owned;
		if (lo < after + 1 + o)
			lo = after + 1 + o;
		hi = end + (no > o ? no : o);
		if (find_local(s, lo, hi, &L) && L - o < best)
			best = L - o;
		owned = hi;
		u = end;
		if (u == horizon)
			break;
	}
	if (best == JF_CRON_NEVER)
		return false;
	*next = best;
	return true;
}

/*
 * Entry point: choose the rule for the schedule (see cron.h).
 */
bool
jf_cron_next(const JfCronSchedule *s, const JfCronZone *zone,
			 int64_t after_utc_sec, int64_t *next_utc_sec)
{
	int64_t		horizon;

	if (after_utc_sec < JF_CRON_MIN_TIME || after_utc_sec > JF_CRON_MAX_TIME)
		return false;
	if (s->flags & JF_CRON_INTERVAL)
	{
		if (s->interval <= 0)
			return false;
		*next_utc_sec = (floor_div(after_utc_sec, s->interval) + 1) * s->interval;
		return true;
	}
	if (s->seconds == 0 || s->minutes == 0 || s->hours == 0 ||
		s->months == 0 || (s->days == 0 && s->weekdays == 0))
		return false;
	if (zone == NULL)
		zone = &jf_cron_zone_utc;
	horizon = after_utc_sec + (int64_t) JF_CRON_HORIZON_YEARS * 366 * SECS_PER_DAY;
	if (s->flags & JF_CRON_HOUR_STAR)
		return next_elapsed(s, zone, after_utc_sec, horizon, next_utc_sec);
	return next_fixed(s, zone, after_utc_sec, horizon, next_utc_sec);
}
