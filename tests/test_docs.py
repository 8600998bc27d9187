"""Cross-references between the Markdown docs resolve: a link
``[text](file.md#anchor)`` names a heading of that file, and a prose
reference ``docs/file.md ("Heading")`` names a heading of that file."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
FILES = sorted(glob.glob(os.path.join(DOCS, "*.md"))
               + [os.path.join(ROOT, "README.md"),
                  os.path.join(ROOT, "benchmarks", "README.md")])
LINK = re.compile(r"\]\(([A-Za-z0-9_]+\.md)#([A-Za-z0-9-]+)\)")
PROSE = re.compile(r"docs/([A-Za-z0-9_]+\.md) \(\"([^\"]+)\"\)")


def headings(path):
    with open(path) as f:
        return [line.lstrip("#").strip() for line in f
                if re.match(r"#{1,6} ", line)]


def anchor(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.lower())
    return text.replace(" ", "-")


def references():
    found = []
    for path in FILES:
        with open(path) as f:
            text = f.read()
        name = os.path.relpath(path, ROOT)
        found += [(name, target, ("anchor", part))
                  for target, part in LINK.findall(text)]
        found += [(name, target, ("heading", part))
                  for target, part in PROSE.findall(text)]
    return found


@pytest.mark.parametrize("source,target,ref", references())
def test_reference_resolves(source, target, ref):
    path = os.path.join(DOCS, target)
    assert os.path.exists(path), "%s refers to missing %s" % (source, target)
    kind, part = ref
    names = headings(path)
    if kind == "anchor":
        assert part in [anchor(h) for h in names], (
            "%s: %s has no heading with anchor #%s" % (source, target, part))
    else:
        assert part in names, ("%s: %s has no heading %r" % (source, target,
                                                           part))


# --- docs/architecture.md ("Where each module is tested") -------------------

TABLE_DOC = os.path.join(DOCS, "architecture.md")
TABLE_HEADING = "Where each module is tested"
PACKAGES = ("hbcore", "hbcore_tf")
PATH = re.compile(r"`([A-Za-z0-9_./]+)`")


def module_table():
    """[(module paths, test paths)] of the table's rows: a row is
    ``| `module` ... | `tests/...` ... |`` in the section; a module path
    ending in / is a folder."""
    with open(TABLE_DOC) as f:
        text = f.read()
    marker = "\n## %s\n" % TABLE_HEADING
    assert marker in text, "docs/architecture.md has no section %r" % (
        TABLE_HEADING)
    section = text.split(marker, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows.append((PATH.findall(cells[0]), PATH.findall(cells[1])))
    return rows


def package_modules():
    """Every .py file of hbcore and hbcore_tf but __init__.py (relative)."""
    found = []
    for package in PACKAGES:
        for folder, _, names in os.walk(os.path.join(ROOT, package)):
            found += [os.path.relpath(os.path.join(folder, n), ROOT)
                      for n in names
                      if n.endswith(".py") and n != "__init__.py"]
    return sorted(found)


def test_module_table_names_existing_files():
    """Every module and test file the table names exists: a test file or a
    module renamed without its row fails here."""
    rows = module_table()
    assert len(rows) > 50, rows
    for modules, tests in rows:
        assert modules and tests, (modules, tests)
        for path in modules:
            assert path.startswith(tuple(p + "/" for p in PACKAGES)), path
            assert os.path.exists(os.path.join(ROOT, path)), (
                "docs/architecture.md (%r) names missing module %s" % (
                    TABLE_HEADING, path))
        for path in tests:
            assert path.startswith("tests/") and path.endswith(".py"), path
            assert os.path.basename(path).startswith("test_"), path
            assert os.path.isfile(os.path.join(ROOT, path)), (
                "docs/architecture.md (%r) names missing test file %s" % (
                    TABLE_HEADING, path))


def test_module_table_covers_every_module():
    """Every module of hbcore and hbcore_tf has a row (its own, or its
    folder's): a new or moved module comes with the tests that cover it."""
    listed = [path for modules, _ in module_table() for path in modules]
    missing = [m for m in package_modules()
               if m not in listed
               and not any(p.endswith("/") and m.startswith(p)
                           for p in listed)]
    assert not missing, (
        "docs/architecture.md (%r) has no row for %s" % (TABLE_HEADING,
                                                         missing))
