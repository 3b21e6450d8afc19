/*-------------------------------------------------------------------------
 *
 * test_cron_random.c
 *	  Unit tests for src/cron.c: randomised cross-checks and parser fuzz.
 *
 * Randomised expressions are cross-checked against brute-force references
 * that know nothing about the schedule's bitmasks: they evaluate sets
 * built alongside the expression text, in UTC and in the rule-based DST
 * zones of cron_zones.c.  Random junk from cron's alphabet must get a
 * coherent answer from the parser.  Ends with speed figures (printed,
 * not asserted).
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

/* unit.h's xorshift64*, seeded in main(): reproducible across platforms */
static uint32_t
rnd(uint32_t n)
{
	return (uint32_t) (unit_rnd64() >> 33) % n;
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
			CHECKF(strncmp(e.message, "no selected month", 17) == 0,
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
	CHECKF(mismatches == 0, "random UTC cross-check: %d mismatches in %d", mismatches,
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
	CHECKF(mismatches == 0, "random DST cross-check: %d mismatches in %d", mismatches,
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
	CHECKF(bad == 0, "parser fuzz: %d incoherent answers", bad);
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
	cron_zones_init();
	unit_rng_state = 0x9e3779b97f4a7c15ull;

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

	return unit_done("test_cron_random");
}
