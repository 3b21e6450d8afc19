/*-------------------------------------------------------------------------
 *
 * cron_parse.c
 *	  Cron expression parser for jobflow: text to JfCronSchedule.
 *
 * A schedule is a handful of bitmasks (see cron.h), filled field by field;
 * every error carries a message in PostgreSQL's errmsg style and the byte
 * position of the problem.  Schedules that can never fire are refused here,
 * so the next-occurrence search (cron.c) always finds an answer.
 *
 * No allocation, no global state, no output: the module can be linked into a
 * backend as is.
 *
 *-------------------------------------------------------------------------
 */
#include "core/cron_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
		int			dim = (m == 2) ? 29 : jf_cron_days_in_month(2001, m);

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
	/* pg_cron's interval schedules ("5 seconds", "10 minutes"): "every ..." */
	if (nfields <= 2 && is_digit(expr[starts[0]]))
	{
		int			p = starts[0];

		while (is_digit(expr[p]))
			p++;
		while (expr[p] && is_blank(expr[p]))
			p++;
		if (is_alpha(expr[p]))
			return parse_interval(expr, starts[0], out, err);
	}

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
