/* jobflow--0.1.0--0.2.0.sql: from the shipped 0.1.0 schema to 0.2.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobflow UPDATE TO '0.2.0'" to load this file. \quit

/*
 * A fresh CREATE EXTENSION runs jobflow--0.1.0.sql and then this script, so
 * a new installation and an upgraded one have the same schema by
 * construction.  Every schema change of 0.2.0 goes here, grouped by the
 * issue it belongs to.
 */

/* ----------------------------------------------------------------------
 * issue 9, Data 6: every path that changes a cron timer applies to the
 * occurrences it has not fired yet.
 *
 * schedule_cron, unschedule_cron and set_cron_active cancel pending
 * occurrences themselves; a plain UPDATE or DELETE of jobflow.cron_timers
 * (which jobflow_user is granted) did not, so occurrences already made
 * kept firing with the old definition, or after the timer was paused or
 * deleted.  This trigger cancels them on every path: the timer's
 * materialiser then makes the next occurrences from the new definition.
 * A change of next_at, updated_at or missed alone (the materialiser's own
 * bookkeeping, or a policy change) leaves them alone.  SECURITY DEFINER:
 * a tenant may not write last_error, and the rows are the timer's own.
 * ---------------------------------------------------------------------- */
CREATE FUNCTION jobflow._cron_sync_occurrences()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	why text;
BEGIN
	IF TG_OP = 'DELETE' THEN
		why := 'cancelled: its cron timer was deleted';
	ELSIF NOT NEW.active AND OLD.active THEN
		why := 'cancelled: its cron timer was paused';
	ELSIF (OLD.schedule, OLD.timezone, OLD.url, OLD.method, OLD.headers, OLD.body,
		   OLD.content_type, OLD.timeout_ms, OLD.max_attempts, OLD.queue, OLD.owner)
		  IS DISTINCT FROM
		  (NEW.schedule, NEW.timezone, NEW.url, NEW.method, NEW.headers, NEW.body,
		   NEW.content_type, NEW.timeout_ms, NEW.max_attempts, NEW.queue, NEW.owner) THEN
		why := 'cancelled: its cron timer was changed';
	ELSE
		RETURN NULL;
	END IF;
	UPDATE jobflow.tasks t
	   SET state = 'cancelled', last_error = why, updated_at = pg_catalog.now()
	 WHERE t.cron_id = OLD.id AND t.state = 'pending';
	RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION jobflow._cron_sync_occurrences() FROM PUBLIC;

CREATE TRIGGER cron_sync_occurrences
	AFTER UPDATE OR DELETE ON jobflow.cron_timers
	FOR EACH ROW EXECUTE FUNCTION jobflow._cron_sync_occurrences();
