# -------------------------------------------------------------------------
#
# test_meta.py
#     META.json for PGXN: valid JSON, the keys the PGXN meta spec 1.0.0
#     requires with values of the right shape, and versions that agree
#     with jobflow.control and the library (src/base/settings.h).
#
# -------------------------------------------------------------------------

import json
import os
import re

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SEMVER = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z-]+)?$")


def read(name):
    with open(os.path.join(REPO, name)) as f:
        return f.read()


def meta():
    return json.loads(read("META.json"))


def control_default_version():
    return re.search(r"^default_version\s*=\s*'([^']+)'", read("jobflow.control"), re.M).group(1)


def test_required_keys():
    m = meta()
    for key in ("name", "abstract", "version", "maintainer", "license", "provides",
                "meta-spec"):
        assert key in m, key
    assert m["meta-spec"]["version"] == "1.0.0"
    assert re.match(r"^[A-Za-z0-9_.-]+$", m["name"]) and m["name"] == "jobflow"
    assert SEMVER.match(m["version"]), m["version"]
    assert isinstance(m["maintainer"], (str, list)) and m["maintainer"]
    assert m["license"] in ("postgresql", "bsd", "mit", "gpl_3", "apache_2_0") or \
        isinstance(m["license"], (list, dict))
    assert m["release_status"] in ("stable", "testing", "unstable")


def test_provides_extension_with_existing_files():
    prov = meta()["provides"]
    assert "jobflow" in prov
    ext = prov["jobflow"]
    assert ext["abstract"] and SEMVER.match(ext["version"])
    for key in ("file", "docfile"):
        assert os.path.isfile(os.path.join(REPO, ext[key])), ext[key]


def test_versions_agree():
    m = meta()
    version = control_default_version()
    assert m["version"] == version
    assert m["provides"]["jobflow"]["version"] == version
    assert re.search(r'#define JOBFLOW_VERSION "%s"' % re.escape(version), read("src/base/settings.h"))
    # an update script to the default version exists and is installed, and
    # the Makefile makes the fresh install script of that version
    scripts = [f for f in os.listdir(REPO) if re.match(r"^jobflow--[\d.]+--%s\.sql$" % re.escape(version), f)]
    assert scripts, "no update script to %s" % version
    for script in scripts:
        assert script in read("Makefile")
    assert re.search(r"^DATA_built = jobflow--%s\.sql$" % re.escape(version), read("Makefile"), re.M)
    # jobflow_net ships with jobflow, at its version
    assert m["provides"]["jobflow_net"]["version"] == version
    assert re.search(r"^default_version = '%s'$" % re.escape(version), read("jobflow_net.control"), re.M)
    assert re.search(r"^DATA_built \+= jobflow_net--%s\.sql$" % re.escape(version), read("Makefile"), re.M)


def test_debian_changelog_version():
    # the package's upstream version is the extension's
    first = read("debian/changelog").splitlines()[0]
    assert re.match(r"^jobflow \(%s-\d+\)" % re.escape(control_default_version()), first), first
