/* jobflow--0.2.0--0.3.0.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobflow UPDATE TO '0.3.0'" to load this file. \quit

/*
 * 0.3.0: the tenant boundary.  A fresh install runs this script after
 * 0.1.0's and 0.2.0's (jobflow--0.3.0.sql is their concatenation behind
 * src/install_prelude.sql), so a database updated from 0.1.0 or 0.2.0 ends
 * up with exactly the schema of a fresh install.  Each section below is
 * one concern of the tenant boundary.
 */

/* ---- section: the objects jobflow trusts (schema, roles) ---- */

/*
 * jobflow's roles are cluster-wide and its schema may have been there
 * before CREATE EXTENSION (src/install_prelude.sql refuses that on a fresh
 * install); 0.1.0 and 0.2.0 took both as they found them.  A role made
 * beforehand by a CREATEROLE user or a database owner could keep what its
 * maker gave it: LOGIN or other attributes, ADMIN OPTION for its maker
 * (who could then grant itself jobflow_admin), members its maker granted.
 * Refuse, on a fresh install and on an update alike, a jobflow role with
 * an attribute, a non-superuser holding ADMIN OPTION on it, or a member of
 * jobflow_admin granted by a non-superuser; and a schema owned by a
 * non-superuser or granting anyone but jobflow's roles, or CREATE to anyone.
 * The DBA decides what to keep; the hint says how.
 */
DO $trust$
DECLARE
	r record;
BEGIN
	FOR r IN
		SELECT a.rolname,
			   a.rolsuper OR a.rolcreaterole OR a.rolcreatedb OR a.rolcanlogin
				   OR a.rolreplication OR a.rolbypassrls AS has_attributes,
			   (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(m.rolname), ', ' ORDER BY m.rolname)
				  FROM pg_catalog.pg_auth_members am
				  JOIN pg_catalog.pg_roles m ON m.oid OPERATOR(pg_catalog.=) am.member
				 WHERE am.roleid OPERATOR(pg_catalog.=) a.oid AND am.admin_option
				   AND NOT m.rolsuper) AS admins,
			   (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(m.rolname), ', ' ORDER BY m.rolname)
				  FROM pg_catalog.pg_auth_members am
				  JOIN pg_catalog.pg_roles m ON m.oid OPERATOR(pg_catalog.=) am.member
				  JOIN pg_catalog.pg_roles g ON g.oid OPERATOR(pg_catalog.=) am.grantor
				 WHERE am.roleid OPERATOR(pg_catalog.=) a.oid
				   AND a.rolname OPERATOR(pg_catalog.=) 'jobflow_admin'::pg_catalog.name
				   AND NOT g.rolsuper) AS granted_by_others
		  FROM pg_catalog.pg_roles a
		 WHERE a.rolname OPERATOR(pg_catalog.=) ANY ('{jobflow_user,jobflow_admin,jobflow_monitor}'::pg_catalog.name[])
		 ORDER BY a.rolname
	LOOP
		IF r.has_attributes THEN
			RAISE EXCEPTION USING
				ERRCODE = 'insufficient_privilege',
				MESSAGE = pg_catalog.format('role "%s" has attributes jobflow''s roles never have', r.rolname),
				DETAIL = 'jobflow''s roles are NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS; this one was made or changed by someone else.',
				HINT = pg_catalog.format('Check who made it, then ALTER ROLE %I NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS, or drop it, and try again.', r.rolname);
		END IF;
		IF r.admins IS NOT NULL THEN
			RAISE EXCEPTION USING
				ERRCODE = 'insufficient_privilege',
				MESSAGE = pg_catalog.format('role "%s" can be granted by roles that are not superusers', r.rolname),
				DETAIL = pg_catalog.format('These roles hold ADMIN OPTION on it, and could grant it to anyone, themselves included: %s.', r.admins),
				HINT = pg_catalog.format('REVOKE ADMIN OPTION FOR %I FROM %s, and try again.', r.rolname, r.admins);
		END IF;
		IF r.granted_by_others IS NOT NULL THEN
			RAISE EXCEPTION USING
				ERRCODE = 'insufficient_privilege',
				MESSAGE = 'role "jobflow_admin" was granted by roles that are not superusers',
				DETAIL = pg_catalog.format('These roles were made members of jobflow_admin by a role that is not a superuser: %s.', r.granted_by_others),
				HINT = 'Revoke those memberships (REVOKE jobflow_admin FROM ...), grant again as a superuser what should stay, and try again.';
		END IF;
	END LOOP;

	IF EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n
				 JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) n.nspowner
				WHERE n.nspname OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.name AND NOT o.rolsuper) THEN
		RAISE EXCEPTION USING
			ERRCODE = 'insufficient_privilege',
			MESSAGE = 'schema "jobflow" belongs to a role that is not a superuser',
			DETAIL = 'Its owner could drop and replace jobflow''s tables and functions.',
			HINT = 'Give it to a superuser (ALTER SCHEMA jobflow OWNER TO ...), and try again.';
	END IF;
	IF EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
				WHERE n.nspname OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.name
				  AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
				  AND (a.privilege_type OPERATOR(pg_catalog.<>) 'USAGE'
					   OR a.grantee OPERATOR(pg_catalog.<>) ALL (ARRAY(
							SELECT x.oid FROM pg_catalog.pg_roles x
							 WHERE x.rolname OPERATOR(pg_catalog.=) ANY ('{jobflow_user,jobflow_admin,jobflow_monitor}'::pg_catalog.name[]))))) THEN
		RAISE EXCEPTION USING
			ERRCODE = 'insufficient_privilege',
			MESSAGE = 'schema "jobflow" grants privileges jobflow does not',
			DETAIL = 'jobflow grants USAGE on its schema to jobflow_user, jobflow_admin and jobflow_monitor, and nothing else.',
			HINT = 'Revoke the others (REVOKE ... ON SCHEMA jobflow FROM ...), and try again.';
	END IF;
END
$trust$;

/* ---- end of section: the objects jobflow trusts ---- */


/* ---- section: search_path of functions that run with more privileges ---- */


/* ---- end of section: search_path ---- */


/* ---- section: who may own tasks ---- */


/* ---- end of section: who may own tasks ---- */


/* ---- section: secrets bound to origins ---- */


/* ---- end of section: secrets bound to origins ---- */


/* ---- section: quotas and wake-ups proportional to what changed ---- */


/* ---- end of section: quotas and wake-ups ---- */


/* ---- section: outcome notifications ---- */


/* ---- end of section: outcome notifications ---- */


/* ---- section: comments of the objects 0.3.0 adds ---- */


/* ---- end of section: comments ---- */

/* the worker waits for this update: wake it */
SELECT pg_catalog.pg_notify('jobflow', '');
