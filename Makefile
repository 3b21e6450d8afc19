#-------------------------------------------------------------------------
#
# Makefile for jobflow
#
# PGXS build of the extension module, plus targets for the plain-C unit
# tests and benchmarks (which need no server).
#
#-------------------------------------------------------------------------

MODULE_big = jobflow
EXTENSION = jobflow
DATA = jobflow--0.1.0.sql jobflow--0.1.0--0.2.0.sql jobflow--0.2.0--0.3.0.sql
# a fresh install of 0.3.0 runs the released scripts in order, behind a
# prelude that refuses a schema made by someone else (src/install_prelude.sql)
DATA_built = jobflow--0.3.0.sql
PGFILEDESC = "jobflow - delayed and recurring HTTP callbacks"

OBJS = \
	src/jobflow.o \
	src/task_check.o \
	src/worker.o \
	src/xact.o \
	src/launcher.o \
	src/launcher_hook.o \
	src/compat.o \
	src/schema_version.o \
	src/guard.o \
	src/feed.o \
	src/dispatch.o \
	src/log_writer.o \
	src/wheel.o \
	src/wheel_pool.o \
	src/http.o \
	src/http_queue.o \
	src/http_request.o \
	src/fair.o \
	src/rate.o \
	src/queues.o \
	src/cron_parse.o \
	src/cron.o \
	src/cron_sql.o \
	src/tenant_api.o \
	src/signing.o \
	src/secrets.o \
	src/outcome_channel.o \
	src/prepared.o \
	src/prune.o \
	src/metrics.o \
	src/fault.o

REGRESS = schedule validation lifecycle cron
REGRESS_OPTS = --inputdir=. --load-extension=jobflow

PG_CPPFLAGS = -I$(srcdir)/src
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare
SHLIB_LINK = -lcurl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

jobflow--0.3.0.sql: src/install_prelude.sql jobflow--0.1.0.sql jobflow--0.1.0--0.2.0.sql jobflow--0.2.0--0.3.0.sql
	cat $^ > $@

# a VPATH build (pg_buildext builds in build-<version>/) needs the objects' directory
ifdef VPATH
$(shell mkdir -p src)
endif

# PGXS does not track headers: a changed struct must rebuild every module
$(OBJS): $(wildcard $(srcdir)/src/*.h)

unit:
	$(MAKE) -C test/unit check

bench-build:
	$(MAKE) -C bench

.PHONY: unit bench-build
