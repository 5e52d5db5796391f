"""The operator's README stays short, and the documentation site in docs/ holds the rest with no page left out.

``tests/run.sh`` builds the site with ``mkdocs build --strict`` (a broken link or anchor fails it); these checks
cover what that build does not: the README's length and its links into docs/, every page being in the nav, and
the README's test-command line being the one ``.ci/run`` reads.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250


class _MkdocsLoader(yaml.SafeLoader):
    """mkdocs.yml with its ``!!python/name:`` tags read as plain strings (safe_load refuses them)."""


def _python_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> str:
    return f"!!python/{suffix}"


_MkdocsLoader.add_multi_constructor("tag:yaml.org,2002:python/", _python_tag)


def _mkdocs() -> dict[str, Any]:
    loaded = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_MkdocsLoader)
    assert isinstance(loaded, dict)
    return loaded


def _nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    raise AssertionError(f"unexpected nav entry {nav!r}")


def test_the_readme_is_at_most_250_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; the depth belongs in docs/"


def test_every_page_of_docs_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    config = _mkdocs()
    assert config["docs_dir"] == "docs"
    listed = _nav_pages(config["nav"])
    assert len(listed) == len(set(listed)), "a page is listed twice in mkdocs.yml's nav"
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(listed) == pages


def test_the_site_is_built_strict_with_material_and_links_checked() -> None:
    config = _mkdocs()
    assert config["site_name"] == "spotshift"
    assert config["theme"]["name"] == "material"
    links = config["validation"]["links"]
    for check in ("not_found", "anchors", "absolute_links", "unrecognized_links"):
        assert links[check] == "warn", check  # under --strict a warning fails the build
    assert config["validation"]["nav"]["omitted_files"] == "warn"
    (superfences,) = [e for e in config["markdown_extensions"] if isinstance(e, dict) and "pymdownx.superfences" in e]
    fences = superfences["pymdownx.superfences"]["custom_fences"]
    assert [f["name"] for f in fences] == ["mermaid"]
    run = (ROOT / "tests" / "run.sh").read_text(encoding="utf-8")
    # Without --quiet: mkdocs 1.6 with --quiet drops the warnings --strict counts, and a broken link passes.
    assert re.search(r'^NO_MKDOCS_2_WARNING=1 "\$py" -m mkdocs build --strict --site-dir "\$\(mktemp -d\)"$', run, re.M)


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """The build tests/run.sh runs (its flags read from there), of the site whose mkdocs.yml is in ``root``."""
    run = (ROOT / "tests" / "run.sh").read_text(encoding="utf-8")
    (flags,) = re.findall(
        r'^NO_MKDOCS_2_WARNING=1 "\$py" -m mkdocs build (.*) --site-dir "\$\(mktemp -d\)"$', run, re.M
    )
    command = [sys.executable, "-m", "mkdocs", "build", *flags.split(), "--site-dir", str(site)]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300)


def test_the_site_builds_and_the_build_fails_on_a_broken_anchor_or_an_orphaned_page(tmp_path: Path) -> None:
    built = _build(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "architecture" / "index.html").is_file()

    copy = tmp_path / "copy"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    with (copy / "docs" / "index.md").open("a", encoding="utf-8") as page:
        page.write("\nSee [the settings](configuration.md#no-such-section).\n")
    broken = _build(copy, tmp_path / "broken")
    assert broken.returncode != 0 and "no-such-section" in broken.stderr

    (copy / "docs" / "index.md").write_text((DOCS / "index.md").read_text(encoding="utf-8"), encoding="utf-8")
    (copy / "docs" / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
    orphaned = _build(copy, tmp_path / "orphaned")
    assert orphaned.returncode != 0 and "orphan.md" in orphaned.stderr


def test_the_readme_links_only_to_pages_that_exist() -> None:
    targets = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    assert targets, "the README links to the documentation site"
    for target in targets:
        assert (ROOT / target).is_file(), target


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    (program,) = re.findall(r"cmd=\$\(awk '(.*)' README\.md\)", ci)
    found = subprocess.run(["awk", program, str(README)], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "bash tests/run.sh"
