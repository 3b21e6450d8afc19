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
