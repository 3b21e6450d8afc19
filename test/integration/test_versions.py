# -------------------------------------------------------------------------
#
# test_versions.py
#     What depends on the server's major version: since PostgreSQL 17 the
#     worker's waits carry names of their own in pg_stat_activity; before,
#     the generic "Extension".  Since 18 the library names itself in
#     pg_get_loaded_modules().
#
# -------------------------------------------------------------------------

import time

from conftest import query


def server_version(db):
    return int(query(db, "SHOW server_version_num")[0]["server_version_num"])


def test_worker_wait_event_is_named(db):
    # an idle worker sleeps in its loop: sample until it is seen waiting
    deadline = time.time() + 10
    seen = set()
    while time.time() < deadline:
        rows = query(db, "SELECT wait_event_type, wait_event FROM pg_stat_activity"
                     " WHERE backend_type = 'jobflow worker' AND datname = current_database()")
        assert len(rows) == 1
        seen.add((rows[0]["wait_event_type"], rows[0]["wait_event"]))
        if ("Extension", "JobflowWorkerMain") in seen or (
                server_version(db) < 170000 and ("Extension", "Extension") in seen):
            break
        time.sleep(0.05)
    if server_version(db) >= 170000:
        assert ("Extension", "JobflowWorkerMain") in seen, seen
    else:
        assert ("Extension", "Extension") in seen, seen


def test_loaded_module_names_itself(db):
    if server_version(db) < 180000:
        return
    with open(__file__.rsplit("/test/", 1)[0] + "/jobflow.control") as f:
        version = [l.split("'")[1] for l in f if l.startswith("default_version")][0]
    rows = query(db, "SELECT module_name, version FROM pg_get_loaded_modules()"
                 " WHERE file_name = 'jobflow.so'")
    assert rows == [{"module_name": "jobflow", "version": version}]
