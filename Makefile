#-------------------------------------------------------------------------
#
# Makefile for jobflow
#
# PGXS build of the extension module, plus targets for the plain-C unit
# tests and benchmarks (which need no server).
#
#-------------------------------------------------------------------------

MODULE_big = jobflow
EXTENSION = jobflow jobflow_net
DATA = jobflow--0.1.0.sql jobflow--0.1.0--0.2.0.sql jobflow--0.2.0--0.3.0.sql
# a fresh install of 0.3.0 runs the released scripts in order, behind a
# prelude that refuses a schema made by someone else (src/install_prelude.sql)
DATA_built = jobflow--0.3.0.sql
# jobflow_net, pg_net's interface backed by jobflow (src/jobflow_net.sql)
DATA_built += jobflow_net--0.3.0.sql
PGFILEDESC = "jobflow - delayed and recurring HTTP callbacks"

OBJS = \
	src/jobflow.o \
	src/core/circuit.o \
	src/core/cron.o \
	src/core/cron_parse.o \
	src/core/fair.o \
	src/core/rate.o \
	src/core/wheel.o \
	src/core/wheel_pool.o \
	src/http/http.o \
	src/http/networks.o \
	src/http/queue.o \
	src/http/request.o \
	src/http/sockets.o \
	src/base/compat.o \
	src/base/cron_zone.o \
	src/base/fault.o \
	src/base/metrics.o \
	src/base/settings.o \
	src/base/signing.o \
	src/launcher/dropped_roles.o \
	src/launcher/hook.o \
	src/launcher/launcher.o \
	src/launcher/prepared.o \
	src/launcher/restore.o \
	src/launcher/slots.o \
	src/launcher/wake.o \
	src/worker/cron.o \
	src/worker/dispatch.o \
	src/worker/feed.o \
	src/worker/guard.o \
	src/worker/log_writer.o \
	src/worker/prune.o \
	src/worker/queues.o \
	src/worker/schema_version.o \
	src/worker/worker.o \
	src/worker/xact.o \
	src/api/changes.o \
	src/api/circuits.o \
	src/api/client_certs.o \
	src/api/commit_wake.o \
	src/api/cron.o \
	src/api/drops.o \
	src/api/explain.o \
	src/api/metrics.o \
	src/api/outcome_channel.o \
	src/api/pg_net_call.o \
	src/api/queues.o \
	src/api/quota.o \
	src/api/secrets.o \
	src/api/signing.o \
	src/api/status.o \
	src/api/task_check.o \
	src/api/task_state.o \
	src/api/tenant_api.o \
	src/api/triggers.o \
	src/api/url_check.o

REGRESS = schedule validation lifecycle cron reserved_settings
REGRESS_OPTS = --inputdir=. --load-extension=jobflow

PG_CPPFLAGS = -I$(srcdir)/src
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare
SHLIB_LINK = -lcurl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# 14 has no security_invoker views: see src/install_pg14.sql.  The file
# depends on the server built against, so it is made again every time.
JF_INSTALL_PARTS = src/install_prelude.sql jobflow--0.1.0.sql jobflow--0.1.0--0.2.0.sql jobflow--0.2.0--0.3.0.sql
ifeq ($(shell test $(MAJORVERSION) -lt 15 && echo old),old)
jobflow--0.3.0.sql: $(JF_INSTALL_PARTS) src/install_pg14.sql FORCE
	cat $(filter %.sql,$^) | sed 's/ WITH (security_invoker = true) AS$$/ AS/' > $@
else
jobflow--0.3.0.sql: $(JF_INSTALL_PARTS) FORCE
	cat $(filter %.sql,$^) > $@
endif

# jobflow_net (pg_net's interface, src/jobflow_net.sql): on 14 its view
# cannot be security_invoker; its WHERE clause filters as the policies do,
# and security_barrier keeps leaky functions from seeing other rows
ifeq ($(shell test $(MAJORVERSION) -lt 15 && echo old),old)
jobflow_net--0.3.0.sql: src/jobflow_net.sql FORCE
	sed 's/ WITH (security_invoker = true) AS$$/ WITH (security_barrier = true) AS/' $< > $@
else
jobflow_net--0.3.0.sql: src/jobflow_net.sql FORCE
	cat $< > $@
endif

FORCE:

# a VPATH build (pg_buildext builds in build-<version>/) needs the objects' directory
ifdef VPATH
$(shell mkdir -p src/core src/http src/base src/launcher src/worker src/api)
endif

# PGXS does not track headers: a changed struct must rebuild every module
$(OBJS): $(wildcard $(srcdir)/src/*.h $(srcdir)/src/*/*.h)

unit:
	$(MAKE) -C test/unit check

bench-build:
	$(MAKE) -C bench

.PHONY: unit bench-build FORCE
