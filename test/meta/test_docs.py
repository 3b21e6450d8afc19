# -------------------------------------------------------------------------
#
# test_docs.py
#     The documentation is split over README.md, docs/, src/README.md and
#     test/README.md: every relative link between them resolves, to a file
#     that exists and, after a #, to a heading of it (GitHub's anchors).
#
# -------------------------------------------------------------------------

import glob
import os
import re

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def documents():
    paths = ["README.md", "src/README.md", "test/README.md", "bench/README.md"]
    paths += sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
    return [p for p in paths if os.path.exists(os.path.join(REPO, p))]


def read(path):
    with open(os.path.join(REPO, path)) as f:
        return FENCE.sub("", f.read())


def anchors(path):
    """GitHub's anchors of a Markdown file's headings."""
    seen = {}
    out = set()
    for title in HEADING.findall(read(path)):
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else "%s-%d" % (slug, n))
    return out


def test_documents_are_found():
    docs = documents()
    assert {"README.md", "src/README.md", "test/README.md", "docs/user-guide.md",
            "docs/operations.md", "docs/settings.md", "docs/upgrading.md",
            "docs/receivers.md"} <= set(docs), docs


def test_the_readme_stays_short():
    # a few hundred lines: what it is, the two commands, a tour, links
    assert len(read("README.md").splitlines()) <= 300


def test_every_relative_link_resolves():
    broken = []
    for doc in documents():
        for target in LINK.findall(read(doc)):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            if not os.path.exists(os.path.join(REPO, resolved)):
                broken.append("%s: %s (no file %s)" % (doc, target, resolved))
            elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                broken.append("%s: %s (no heading #%s in %s)" % (doc, target, anchor, resolved))
    assert broken == [], "\n".join(broken)


def test_the_checks_see_a_broken_link():
    # the reading finds links and headings (else the test above passes on nothing)
    assert LINK.findall("see [x](docs/a.md#b) and ![img](i.png)") == ["docs/a.md#b"]
    assert "who-may-do-what" in anchors("docs/user-guide.md")
