"""The documentation as a site, built by the tests: every page renders, every link in it resolves, the
front door stays a front door, and every block of docs/examples.md runs, in order, in one workspace."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import markdown
import pytest

from opbyop.records import Fault, Status

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
         ROOT / "deployments" / "README.md", ROOT / "configs" / "system_descs" / "README.md"]
EXAMPLES = ROOT / "docs" / "examples.md"
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
_UNTIL_CTRL_C = re.compile(r"^(?P<command>.+?)\s+# until Ctrl-C\s*$", re.M)
# A command that serves until Ctrl-C (the docs mark it): started, given until it prints its address,
# then interrupted as a user would; it must end cleanly.
# (set -m: a background job of a script ignores SIGINT otherwise, as no terminal's would)
UNTIL_CTRL_C = r"""
until_ctrl_c() {
  set -m
  "$@" > served.log 2>&1 &
  local pid=$! i status=0
  set +m
  for i in $(seq 600); do grep -q "http://" served.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  grep -q "http://" served.log || { cat served.log; echo "no address from: $*" >&2; kill -INT $pid; return 1; }
  kill -INT $pid
  wait $pid || status=$?
  cat served.log
  [ $status -eq 0 ] || [ $status -eq 130 ]
}
"""


def site(out: Path) -> dict[Path, Path]:
    """Each page rendered to HTML under `out` (its links to pages made links to their HTML); page -> file."""
    built = {}
    for page in PAGES:
        html = markdown.markdown(page.read_text(), extensions=["tables", "fenced_code", "toc"])
        html = re.sub(r'href="([^"#:]+)\.md(#[^"]*)?"', r'href="\1.html\2"', html)
        target = out / page.relative_to(ROOT).with_suffix(".html")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"<!DOCTYPE html><meta charset=utf-8><title>{page.stem}</title>\n{html}\n")
        built[page] = target
    (out / "index.html").write_text((out / "docs" / "index.html").read_text())
    return built


def test_the_docs_site_builds_and_every_link_in_it_resolves(tmp_path: Path) -> None:
    built = site(tmp_path / "site")
    assert all(path.stat().st_size > 200 for path in built.values())
    broken = []
    for page in PAGES:
        for target in _LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
    # every page of docs/ is reachable from the site's index
    index = (ROOT / "docs" / "index.md").read_text()
    unlinked = [p.name for p in (ROOT / "docs").glob("*.md") if p.name != "index.md" and f"({p.name})" not in index]
    assert unlinked == []


def test_the_readme_is_a_front_door_with_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    assert commands == ["make run", "make test"]


def blocks() -> list[str]:
    return _BLOCK.findall(EXAMPLES.read_text())


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """One workspace for every example, as a reader who runs them in order has."""
    work = tmp_path_factory.mktemp("examples")
    env = {**os.environ, "OPBYOP_HOME": str(work / "home"), "COLUMNS": "200",
           "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"}
    env.pop("JAX_PLATFORMS", None)
    return work, env


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(blocks())), ids=[b.splitlines()[0][:40] for b in blocks()])
def test_every_example_runs_as_written(workspace: tuple[Path, dict[str, str]], index: int) -> None:
    work, env = workspace
    script = _UNTIL_CTRL_C.sub(lambda m: f"until_ctrl_c {m.group('command')}", blocks()[index])
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", UNTIL_CTRL_C + script], cwd=work, env=env,
                          capture_output=True, text=True, timeout=1100)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{script}\n--- output\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"


# How the pages name each fault in their "Statuses say whose fault" paragraph.
FAULT_WORDS = {Fault.COMPILER: "compiler's", Fault.DEVICE: "device's", Fault.FRONTEND: "frontend's",
               Fault.OPBYOP: "opbyop's own", Fault.INFRA: "infrastructure's"}


@pytest.mark.parametrize("page", ["README.md", "docs/how-it-works.md"])
def test_the_pages_name_every_status_under_its_fault_as_records_says(page: str) -> None:
    """The statuses' one home is opbyop.records.Status; the pages' lists are held to it, so a new
    status or a moved one fails here until the page says it."""
    text = (ROOT / page).read_text()
    paragraph = re.split(r"\n- \*\*", text.split("Statuses say whose fault", 1)[1], maxsplit=1)[0]
    starts = sorted((paragraph.index(word), fault) for fault, word in FAULT_WORDS.items())
    misplaced = []
    for status in Status:
        if status.fault is Fault.NONE:
            continue
        at = paragraph.find(f"`{status.value}`")
        under = max((s for s in starts if s[0] < at), default=(0, None))[1] if at >= 0 else None
        if under is not status.fault:
            misplaced.append(f"{status.value}: {status.fault.value}, the page: {under.value if under else 'missing'}")
    assert misplaced == []
