# -------------------------------------------------------------------------
#
# test_comments.py
#     Self-documenting schema (issue 10, item 5): every table, view,
#     function and type of jobflow carries a comment, and so do the
#     columns whose meaning is not obvious from their name, so that
#     \dx+ jobflow and \d+ explain themselves.
#
# -------------------------------------------------------------------------

from conftest import query

COLUMNS = {
    "tasks": ["run_at", "attempts", "attempts_base", "max_attempts", "timeout_ms", "queue",
              "owner", "updated_at", "last_status", "last_error", "cron_id", "cron_at",
              "flow_key", "flow_at"],
    "queues": ["max_concurrent_per_key", "max_per_second_per_key", "ordered", "dead_letter"],
    "task_log": ["attempt", "owner", "scheduled_at", "started_at", "outcome", "response"],
    "cron_timers": ["schedule", "timezone", "missed", "next_at", "overlap", "skipped",
                    "last_skipped_at"],
    "failed_tasks": ["failed_at"],
    "stats": ["metric", "labels"],
}


def test_every_object_has_a_comment(db):
    missing = query(db, """
        SELECT 'function ' || p.oid::regprocedure AS what FROM pg_proc p
         WHERE p.pronamespace = 'jobflow'::regnamespace
           AND obj_description(p.oid, 'pg_proc') IS NULL
        UNION ALL
        SELECT 'relation ' || c.oid::regclass FROM pg_class c
         WHERE c.relnamespace = 'jobflow'::regnamespace AND c.relkind IN ('r', 'v', 'p')
           AND obj_description(c.oid, 'pg_class') IS NULL
        UNION ALL
        SELECT 'type ' || t.oid::regtype FROM pg_type t
         WHERE t.typnamespace = 'jobflow'::regnamespace AND t.typtype = 'e'
           AND obj_description(t.oid, 'pg_type') IS NULL""")
    assert missing == []


def test_non_obvious_columns_have_comments(db):
    missing = []
    for rel, cols in COLUMNS.items():
        for col in cols:
            rows = query(db, "SELECT col_description(('jobflow.' || %s)::regclass, a.attnum) AS c"
                         "  FROM pg_attribute a WHERE a.attrelid = ('jobflow.' || %s)::regclass"
                         "   AND a.attname = %s", (rel, rel, col))
            assert rows, (rel, col)
            if not rows[0]["c"]:
                missing.append("%s.%s" % (rel, col))
    assert missing == []
