/*-------------------------------------------------------------------------
 *
 * cron.c
 *	  Cron expression parser and next-occurrence computation for jobflow.
 *
 * A schedule is a handful of bitmasks (see cron.h), so matching one field is
 * a bit test and finding the next matching value of a field is a mask shift
 * plus count-trailing-zeros.  The search runs on "local seconds": local wall
 * time written as if it were UTC, which makes calendar arithmetic exact and
 * zone independent.  Time zones enter only through the offset callback: the
 * UTC timeline is walked in stretches of constant offset, inside which
 * local = utc + offset is a straight line, and the DST rules of cron.h are
 * applied at the joins between stretches.
 *
 * No allocation, no global state, no output: the module can be linked into a
 * backend as is.
 *
 *-------------------------------------------------------------------------
 */
#include "cron.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SECS_PER_DAY		INT64_C(86400)

/* How a field is checked and reported */
typedef struct CronField
{
	const char *name;			/* for messages */
	int			min;
	int			max;
	const char *const *names;	/* full names, index + names_base = value */
	int			names_base;
	int			nnames;
} CronField;

static const char *const month_names[] = {
	"january", "february", "march", "april", "may", "june", "july",
	"august", "september", "october", "november", "december"
};
static const char *const day_names[] = {
	"sunday", "monday", "tuesday", "wednesday", "thursday", "friday",
	"saturday"
};

enum
{
	F_SECOND, F_MINUTE, F_HOUR, F_DOM, F_MONTH, F_DOW
};

static const CronField cron_fields[] = {
	{"second", 0, 59, NULL, 0, 0},
	{"minute", 0, 59, NULL, 0, 0},
	{"hour", 0, 23, NULL, 0, 0},
	{"day-of-month", 1, 31, NULL, 0, 0},
	{"month", 1, 12, month_names, 1, 12},
	{"day-of-week", 0, 7, day_names, 0, 7},
};

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
 *		Parsing
 * ----------------------------------------------------------------
 */

static bool
is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
		c == '\f';
}

static bool
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool
is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static char
lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char) (c - 'A' + 'a') : c;
}

/*
 * Report an error.  Always returns false so callers can "return fail(...)".
 * The message goes to users through ereport, hence errmsg style.
 */
#if defined(__GNUC__)
static bool fail(JfCronError *err, int position, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));
#endif
static bool
fail(JfCronError *err, int position, const char *fmt,...)
{
	va_list		ap;

	if (err == NULL)
		return false;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	err->position = position;
	return false;
}

/*
 * Copy a piece of user input for quoting in a message: bounded in length and
 * restricted to printable ASCII, so a message never carries a broken
 * multibyte sequence into the server log.
 */
static const char *
quote_text(char *buf, size_t bufsize, const char *s, int len)
{
	int			n = 0;

	if (len > 24)
		len = 24;
	while (n < len && (size_t) n + 1 < bufsize)
	{
		unsigned char c = (unsigned char) s[n];

		buf[n] = (c >= 0x20 && c < 0x7f) ? (char) c : '?';
		n++;
	}
	buf[n] = '\0';
	return buf;
}

/* Case-insensitive comparison of s[0..len) with a NUL-terminated word */
static bool
word_equals(const char *s, int len, const char *word)
{
	int			i;

	for (i = 0; i < len; i++)
		if (word[i] == '\0' || lower(s[i]) != word[i])
			return false;
	return word[len] == '\0';
}

/*
 * Parse one value (number or name) at *pos of a field ending at end.
 * range_lo is the start of the range this value closes, or -1; what
 * describes the context for "missing value" errors.
 */
static bool
parse_value(const char *in, int *pos, int end, const CronField *f,
			int range_lo, const char *what, int *value, JfCronError *err)
{
	int			start = *pos;
	int			p = start;
	char		buf[32];

	if (p < end && is_digit(in[p]))
	{
		int64_t		v = 0;

		while (p < end && is_digit(in[p]))
		{
			if (v <= 1000000)
				v = v * 10 + (in[p] - '0');
			p++;
		}
		if (v < f->min || v > f->max)
			return fail(err, start, "value %s out of range for %s field (%d-%d)",
						quote_text(buf, sizeof(buf), in + start, p - start),
						f->name, f->min, f->max);
		*value = (int) v;
		*pos = p;
		return true;
	}
	if (p < end && is_alpha(in[p]))
	{
		int			i;

		while (p < end && is_alpha(in[p]))
			p++;
		for (i = 0; i < f->nnames; i++)
		{
			if ((p - start == 3 &&
				 lower(in[start]) == f->names[i][0] &&
				 lower(in[start + 1]) == f->names[i][1] &&
				 lower(in[start + 2]) == f->names[i][2]) ||
				word_equals(in + start, p - start, f->names[i]))
			{
				*value = i + f->names_base;
				/* "mon-sun": Sunday closing a range that starts later is 7 */
				if (range_lo > 0 && f->names == day_names && *value == 0)
					*value = 7;
				*pos = p;
				return true;
			}
		}
		quote_text(buf, sizeof(buf), in + start, p - start);
		if (f->names == month_names)
			return fail(err, start, "invalid month name \"%s\"", buf);
		if (f->names == day_names)
			return fail(err, start, "invalid day-of-week name \"%s\"", buf);
		return fail(err, start, "invalid value \"%s\" in %s field", buf, f->name);
	}
	if (p >= end)
		return fail(err, p, "missing value %s in %s field", what, f->name);
	return fail(err, p, "unexpected character \"%s\" in %s field",
				quote_text(buf, sizeof(buf), in + p, 1), f->name);
}

/*
 * Parse the field in[start..end) into a bitmask.  A field is a comma list of
 * "*", "N", "N-M", each optionally followed by "/S".
 */
static bool
parse_field(const char *in, int start, int end, const CronField *f,
			uint64_t *mask_out, JfCronError *err)
{
	uint64_t	mask = 0;
	int			pos = start;
	char		buf[32];

	for (;;)
	{
		int			item = pos;
		int			lo,
					hi,
					step = 1,
					v;
		bool		single = false;

		if (pos >= end || in[pos] == ',')
			return fail(err, pos, "empty list element in %s field", f->name);
		if (in[pos] == '*')
		{
			lo = f->min;
			hi = f->max;
			pos++;
		}
		else
		{
			if (!parse_value(in, &pos, end, f, -1, "at start of list element",
							 &lo, err))
				return false;
			hi = lo;
			single = true;
			if (pos < end && in[pos] == '-')
			{
				pos++;
				if (!parse_value(in, &pos, end, f, lo, "after \"-\"", &hi, err))
					return false;
				if (lo > hi)
					return fail(err, item,
								"invalid range %s in %s field: start is greater than end",
								quote_text(buf, sizeof(buf), in + item, pos - item),
								f->name);
				single = false;
			}
		}
		if (pos < end && in[pos] == '/')
		{
			int			sstart = ++pos;
			int64_t		sv = 0;

			if (pos >= end || !is_digit(in[pos]))
				return fail(err, pos, "step must be a number in %s field", f->name);
			while (pos < end && is_digit(in[pos]))
			{
				if (sv <= 1000000)
					sv = sv * 10 + (in[pos] - '0');
				pos++;
			}
			if (sv == 0)
				return fail(err, sstart, "step must be greater than zero");
			if (sv > f->max - f->min + 1)
				return fail(err, sstart, "step %s out of range for %s field (1-%d)",
							quote_text(buf, sizeof(buf), in + sstart, pos - sstart),
							f->name, f->max - f->min + 1);
			step = (int) sv;
			if (single)
				hi = f->max;	/* "N/S" means "N-max/S" */
		}
		for (v = lo; v <= hi; v += step)
			mask |= UINT64_C(1) << v;

		if (pos >= end)
			break;
		if (in[pos] != ',')
			return fail(err, pos, "unexpected character \"%s\" in %s field",
						quote_text(buf, sizeof(buf), in + pos, 1), f->name);
		pos++;
	}
	*mask_out = mask;
	return true;
}

static bool
is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int
days_in_month(int64_t y, int m)
{
	static const int dim[] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

	return (m == 2 && is_leap(y)) ? 29 : dim[m];
}

/*
 * Refuse a schedule that can never fire: only possible when days must match
 * day-of-month (AND rule) and no selected month is long enough.
 */
static bool
check_possible(const JfCronSchedule *s, int dom_pos, JfCronError *err)
{
	int			m;

	if ((s->flags & (JF_CRON_DOM_STAR | JF_CRON_DOW_STAR)) == 0)
		return true;			/* OR rule: every weekday occurs in every month */
	for (m = 1; m <= 12; m++)
	{
		int			dim = (m == 2) ? 29 : days_in_month(2001, m);

		if ((s->months & (1u << m)) && (s->days & (((1u << dim) - 1) << 1)))
			return true;
	}
	if ((s->days & (s->days - 1)) == 0)
		return fail(err, dom_pos, "no selected month has a day %d",
					__builtin_ctz(s->days));
	return fail(err, dom_pos,
				"no selected month has any of the selected days of month");
}

/* Parse "every N unit"; pos is just after the word "every" */
static bool
parse_interval(const char *in, int pos, JfCronSchedule *out, JfCronError *err)
{
	static const struct
	{
		const char *word;
		int64_t		secs;
	}			units[] = {
		{"s", 1}, {"sec", 1}, {"secs", 1}, {"second", 1}, {"seconds", 1},
		{"m", 60}, {"min", 60}, {"mins", 60}, {"minute", 60}, {"minutes", 60},
		{"h", 3600}, {"hr", 3600}, {"hrs", 3600}, {"hour", 3600}, {"hours", 3600},
		{"d", 86400}, {"day", 86400}, {"days", 86400},
	};
	int64_t		n = 1;
	int			nstart,
				ustart;
	size_t		i;
	char		buf[32];

	while (in[pos] && is_blank(in[pos]))
		pos++;
	nstart = pos;
	if (in[pos] == '\0')
		return fail(err, pos, "missing interval after \"every\"");
	if (is_digit(in[pos]))
	{
		n = 0;
		while (is_digit(in[pos]))
		{
			if (n <= 100000000)
				n = n * 10 + (in[pos] - '0');
			pos++;
		}
		if (n == 0)
			return fail(err, nstart, "interval must be greater than zero");
		while (in[pos] && is_blank(in[pos]))
			pos++;
	}
	ustart = pos;
	while (is_alpha(in[pos]))
		pos++;
	if (pos == ustart)
	{
		if (in[pos] == '\0')
			return fail(err, pos,
						"missing time unit (seconds, minutes, hours or days)");
		return fail(err, pos, "unexpected character \"%s\" in interval",
					quote_text(buf, sizeof(buf), in + pos, 1));
	}
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (word_equals(in + ustart, pos - ustart, units[i].word))
			break;
	if (i == sizeof(units) / sizeof(units[0]))
		return fail(err, ustart,
					"unknown time unit \"%s\" (use seconds, minutes, hours or days)",
					quote_text(buf, sizeof(buf), in + ustart, pos - ustart));
	if (n > 366 * 86400 / units[i].secs)
		return fail(err, nstart, "interval must be at most 366 days");
	while (in[pos] && is_blank(in[pos]))
		pos++;
	if (in[pos] != '\0')
		return fail(err, pos, "unexpected text after interval");

	memset(out, 0, sizeof(*out));
	out->interval = n * units[i].secs;
	out->flags = JF_CRON_INTERVAL;
	return true;
}

/*
 * Entry point for validation and parsing; see cron.h for the syntax.
 */
bool
jf_cron_parse(const char *expr, JfCronSchedule *out, JfCronError *err)
{
	static const struct
	{
		const char *name;
		const char *expansion;
	}			macros[] = {
		{"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"},
		{"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
		{"@daily", "0 0 * * *"}, {"@midnight", "0 0 * * *"},
		{"@hourly", "0 * * * *"},
	};
	int			starts[7],
				ends[7];
	int			nfields = 0,
				pos = 0,
				first,
				f,
				i;
	uint64_t	masks[6];
	char		buf[32];

	if (err)
	{
		err->message[0] = '\0';
		err->position = 0;
	}
	if (expr == NULL)
		return fail(err, 0, "schedule is empty");

	/* split into blank-separated words, remembering up to 7 of them */
	for (;;)
	{
		int			s;

		while (expr[pos] && is_blank(expr[pos]))
			pos++;
		if (expr[pos] == '\0')
			break;
		s = pos;
		while (expr[pos] && !is_blank(expr[pos]))
			pos++;
		if (nfields < 7)
		{
			starts[nfields] = s;
			ends[nfields] = pos;
		}
		nfields++;
	}
	if (nfields == 0)
		return fail(err, 0, "schedule is empty");

	if (expr[starts[0]] == '@')
	{
		for (i = 0; i < (int) (sizeof(macros) / sizeof(macros[0])); i++)
			if (word_equals(expr + starts[0], ends[0] - starts[0], macros[i].name))
				break;
		if (i == (int) (sizeof(macros) / sizeof(macros[0])))
			return fail(err, starts[0], "unknown macro \"%s\"",
						quote_text(buf, sizeof(buf), expr + starts[0],
								   ends[0] - starts[0]));
		if (nfields > 1)
			return fail(err, starts[1], "unexpected text after \"%s\"",
						macros[i].name);
		return jf_cron_parse(macros[i].expansion, out, err);
	}
	if (word_equals(expr + starts[0], ends[0] - starts[0], "every"))
		return parse_interval(expr, ends[0], out, err);

	if (nfields < 5 || nfields > 6)
		return fail(err, nfields > 6 ? starts[6] : ends[nfields - 1],
					"expected 5 or 6 fields, found %d", nfields);

	memset(out, 0, sizeof(*out));
	first = (nfields == 6) ? F_SECOND : F_MINUTE;
	masks[F_SECOND] = 1;		/* second 0 when no seconds field */
	for (f = first; f <= F_DOW; f++)
	{
		int			k = f - first;

		if (!parse_field(expr, starts[k], ends[k], &cron_fields[f], &masks[f], err))
			return false;
		if (expr[starts[k]] == '*')
			out->flags |= (f == F_HOUR) ? JF_CRON_HOUR_STAR :
				(f == F_DOM) ? JF_CRON_DOM_STAR :
				(f == F_DOW) ? JF_CRON_DOW_STAR : 0;
	}
	if (nfields == 6)
		out->flags |= JF_CRON_HAS_SECONDS;
	out->seconds = masks[F_SECOND];
	out->minutes = masks[F_MINUTE];
	out->hours = (uint32_t) masks[F_HOUR];
	out->days = (uint32_t) masks[F_DOM];
	out->months = (uint16_t) masks[F_MONTH];
	/* day-of-week 7 is Sunday */
	out->weekdays = (uint8_t) ((masks[F_DOW] | (masks[F_DOW] >> 7)) & 0x7f);

	return check_possible(out, starts[F_DOM - first], err);
}

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
		dmask = month_day_mask(s, first_day, days_in_month(y, m)) & (~0u << d);
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
