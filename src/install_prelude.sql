/*
 * src/install_prelude.sql: the first statement of a fresh install.
 *
 * jobflow--0.3.0.sql is this file followed by the scripts of 0.1.0, 0.1.0
 * to 0.2.0 and 0.2.0 to 0.3.0 (the Makefile concatenates them).  CREATE
 * EXTENSION runs it as a superuser with the schema jobflow first in its
 * search_path, and makes that schema only when it does not exist yet: a
 * schema someone made before would be used as it is.  Its owner could drop
 * and replace jobflow's tables, and functions or operators planted in it
 * would be resolved by the install itself.  So, before anything else runs,
 * the schema must be empty and belong to a superuser, and no role but its
 * owner may have a privilege on it, except USAGE for jobflow's roles (what
 * DROP EXTENSION leaves of an earlier install).  Every name here is
 * qualified.
 */
DO $prelude$
DECLARE
	s record;
BEGIN
	SELECT n.oid, n.nspowner, n.nspacl,
		   (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) n.nspowner) AS owner_super
	  INTO s
	  FROM pg_catalog.pg_namespace n
	 WHERE n.nspname OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.name;
	IF NOT s.owner_super THEN
		RAISE EXCEPTION USING
			ERRCODE = 'insufficient_privilege',
			MESSAGE = pg_catalog.format('schema "jobflow" belongs to role "%s", not to a superuser',
										s.nspowner::pg_catalog.regrole),
			DETAIL = 'CREATE EXTENSION jobflow uses an existing schema of that name, and its owner could change jobflow''s objects.',
			HINT = 'Drop the schema, or give it to a superuser with ALTER SCHEMA jobflow OWNER TO, and try again.';
	END IF;
	/* what DROP EXTENSION leaves of an earlier install: USAGE for its roles */
	IF s.nspacl IS NOT NULL AND EXISTS (
		SELECT 1 FROM pg_catalog.aclexplode(s.nspacl) a
		 WHERE a.grantee OPERATOR(pg_catalog.<>) s.nspowner
		   AND (a.privilege_type OPERATOR(pg_catalog.<>) 'USAGE'
				OR a.grantee OPERATOR(pg_catalog.<>) ALL (ARRAY(
					SELECT r.oid FROM pg_catalog.pg_roles r
					 WHERE r.rolname OPERATOR(pg_catalog.=) ANY ('{jobflow_user,jobflow_admin,jobflow_monitor}'::pg_catalog.name[]))))) THEN
		RAISE EXCEPTION USING
			ERRCODE = 'insufficient_privilege',
			MESSAGE = 'schema "jobflow" grants privileges to other roles',
			DETAIL = 'jobflow grants the privileges on its schema itself.',
			HINT = 'Revoke them (REVOKE ALL ON SCHEMA jobflow FROM ...), or drop the schema, and try again.';
	END IF;
	IF EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
				WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
				  AND d.refobjid OPERATOR(pg_catalog.=) s.oid
				  AND d.deptype OPERATOR(pg_catalog.=) 'n'::"char"
				  AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_extension'::pg_catalog.regclass) THEN
		RAISE EXCEPTION USING
			ERRCODE = 'duplicate_schema',
			MESSAGE = 'schema "jobflow" already contains objects',
			DETAIL = 'A fresh install of jobflow needs an empty schema: objects made there before would be used by it.',
			HINT = 'Drop the schema or the objects in it, and try again.';
	END IF;
END
$prelude$;

