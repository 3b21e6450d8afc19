/*-------------------------------------------------------------------------
 *
 * cron_zone.h
 *	  Cron schedules in PostgreSQL's time zones (cron_zone.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_CRON_ZONE_H
#define JOBFLOW_CRON_ZONE_H

#include "postgres.h"

#include "core/cron.h"
#include "datatype/timestamp.h"
#include "pgtime.h"

/* parse a schedule, or raise its error (22023) with a hint */
extern void jf_cron_parse_sql(const char *expr, JfCronSchedule *s);
/* a time zone by name, or raise an error (naming it if it is printable) */
extern pg_tz *jf_cron_lookup_zone(const char *name);
/* the first occurrence after "after"; false: none (the schedule never fires) */
extern bool jf_cron_next_occurrence(const JfCronSchedule *s, pg_tz *tz,
									TimestampTz after, TimestampTz *next);

#endif							/* JOBFLOW_CRON_ZONE_H */
