"""Run the operator guides' marked shell blocks as written (tests/e2e/test_guides.py).

Convention (documented in docs/deploy.md, "Runnable blocks"): a fenced block whose info string is
``sh guide:STEP`` is a step of the walk-through. Its commands run one by one in ``bash`` (lines joined at a
trailing backslash; comment-only and blank lines skipped):

* ``export NAME=VALUE``: NAME is set for the rest of that operator's steps. If the line's comment says
  ``(placeholder)``, the test must supply NAME (and supplies nothing that is not such a line); otherwise
  ``bash`` evaluates VALUE (``$(...)``, ``$PWD``, ``~``...) as a reader's shell would.
* a command ending in ``&``: started in the background in its own process group (killed at the end);
* anything else: run in the foreground; a non-zero exit fails the test with the step and the command.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BLOCK_RE = re.compile(r"^```sh guide:(?P<step>[\w-]+)[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
EXPORT_RE = re.compile(r"^export (?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")


class GuideError(AssertionError):
    """A guide command failed, or a block broke the convention."""


@dataclass(frozen=True)
class Block:
    doc: str
    step: str
    body: str

    def commands(self) -> list[str]:
        """The block's commands: continuation lines joined, blank and comment-only lines dropped."""
        out: list[str] = []
        cur = ""
        for line in self.body.splitlines():
            if cur:
                cur += " " + line.strip()
            else:
                cur = line.strip()
            if cur.endswith("\\"):
                cur = cur[:-1].rstrip()
                continue
            if cur and not cur.startswith("#"):
                out.append(cur)
            cur = ""
        if cur:
            out.append(cur)
        return out


def guide_blocks(*docs: str) -> dict[str, Block]:
    """Every ``sh guide:STEP`` block of the docs (paths relative to the repository), by step name."""
    blocks: dict[str, Block] = {}
    for doc in docs:
        for m in BLOCK_RE.finditer((REPO / doc).read_text()):
            step = m.group("step")
            if step in blocks:
                raise GuideError(f"step {step!r} appears twice ({blocks[step].doc}, {doc})")
            blocks[step] = Block(doc, step, m.group("body"))
    return blocks


@dataclass
class Shell:
    """One reader's shell: an environment that ``export`` lines extend, a working directory, and the
    background processes it started."""

    name: str
    cwd: Path
    env: dict[str, str]
    log_dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, block: Block, placeholders: dict[str, str] | None = None, timeout: float = 180) -> str:
        """Run a block's commands in order; returns their stdout, one command's after another's on a new
        line."""
        given = dict(placeholders or {})
        declared: set[str] = set()
        outputs: list[str] = []
        for cmd in block.commands():
            where = f"{block.doc} [{block.step}] ({self.name}): {cmd}"
            m = EXPORT_RE.match(cmd)
            if m is not None:
                name = m.group("name")
                if "(placeholder)" in cmd:
                    declared.add(name)
                    if name not in given:
                        raise GuideError(f"{where}: placeholder {name} not supplied by the test")
                    self.env[name] = given[name]
                    continue
                if name in given:
                    raise GuideError(f"{where}: {name} is not marked (placeholder); the test may not set it")
                self.env[name] = self.bash(f'{cmd}\nprintf %s "${name}"', where, timeout).strip()
                continue
            if cmd.endswith("&") and not cmd.endswith("&&"):
                self._background(cmd[:-1].rstrip(), block.step)
                continue
            outputs.append(self.bash(cmd, where, timeout))
        unused = set(given) - declared
        if unused:
            raise GuideError(f"{block.doc} [{block.step}]: no placeholder {sorted(unused)} in this block")
        return "\n".join(o.rstrip("\n") for o in outputs)

    def bash(self, cmd: str, where: str, timeout: float) -> str:
        """Run one command in the foreground; it fails at once, not at ``timeout``, if one of this shell's
        background processes exits meanwhile (a node that refused its flags: the guide's wait loop would
        wait for it forever)."""
        proc = subprocess.Popen(
            ["bash", "-c", "set -o pipefail\n" + cmd], cwd=self.cwd, env=self.env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        deadline = time.time() + timeout
        try:
            while True:
                try:
                    stdout, stderr = proc.communicate(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    died = [p.returncode for p in self.procs if p.poll() is not None]
                    if died or time.time() > deadline:
                        why = (
                            f"a background process exited ({died})"
                            if died
                            else f"still running after {timeout}s"
                        )
                        raise GuideError(f"{where}: {why}\n{self.logs()}") from None
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.returncode != 0:
            raise GuideError(
                f"{where}: exit {proc.returncode}\nstdout: {stdout[-2000:]}\nstderr: {stderr[-3000:]}\n"
                f"{self.logs()}"
            )
        return stdout

    def _background(self, cmd: str, step: str) -> None:
        log = open(self.log_dir / f"{self.name}-{step}.out", "ab")
        try:
            self.procs.append(
                subprocess.Popen(
                    ["bash", "-c", cmd],
                    cwd=self.cwd,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            )
        finally:
            log.close()

    def logs(self, lines: int = 15) -> str:
        """The ends of the log files in this shell's tree (the guides redirect the nodes' output there)."""
        out = []
        for root in (self.cwd, self.log_dir):
            for p in sorted(root.rglob("*.log")) + sorted(root.glob(f"{self.name}-*.out")):
                with contextlib.suppress(OSError):
                    tail = p.read_text(errors="replace").splitlines()[-lines:]
                    out.append(f"--- {p}\n" + "\n".join(tail))
        return "\n".join(out)

    def check_alive(self) -> None:
        """Raise if a background process exited."""
        for p in self.procs:
            if p.poll() is not None:
                raise GuideError(f"{self.name}: background process exited with {p.returncode}\n{self.logs()}")

    def stop(self, sig: int = signal.SIGTERM, grace: float = 15) -> None:
        """Signal every background process group, then SIGKILL what is left."""
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, sig)
        deadline = time.time() + grace
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.time()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        self.procs.clear()
