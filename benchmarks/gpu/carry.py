"""Whether the wheels carried to the GPU machine (``benchmarks/gpu/carry.txt``) complete its image.

The GPU machine cannot reach a package registry; what its image lacks travels as wheels
(``benchmarks/gpu/carry.sh`` downloads them into ``.gpucarry/whl/``, installed with ``--no-deps``). A
requirement that is neither carried nor in the image (``benchmarks/gpu/image-packages.txt``, copied from the
device tool's list) fails only there, at an import (fastapi 0.165 imports ``opentelemetry``, and
``opentelemetry-api`` was not carried). This module reads each carried package's requirements from the
distribution installed here (the carried versions are this ``.venv``'s, checked too), evaluates their markers
for the GPU machine's Python 3.12 on Linux x86-64, and lists what would be missing. The project's own
dependencies (``pyproject.toml``) must be carried or in the image as well.

``python -m benchmarks.gpu.carry`` prints the gaps and exits 1 if there is one. Versions in the image are
not listed, so an image package too old for a carried one's requirement is not caught here: the device
script's ``imports`` step imports every carried top-level module on the machine itself.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CARRY_FILE = HERE / "carry.txt"
"""The carried packages, ``name==version`` a line."""
IMAGE_FILE = HERE / "image-packages.txt"
"""The packages the GPU image holds, a name a line."""

GPU_PYTHON = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}
"""The GPU machine's environment markers (KINDS.md: Python 3.12.3 on Linux x86-64)."""

NOT_IMPORTED = {
    "grpcio-tools": "hivemind lists it to compile its .proto files when built; nothing imports grpc_tools "
    "at run time (its modules ship compiled)",
}
"""Requirements that may stay missing on the GPU machine, and why."""


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503: lower case, runs of ``-_.`` as one ``-``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_names(path: Path) -> list[str]:
    """The non-empty, non-comment lines of ``path``."""
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def carried() -> dict[str, str]:
    """Canonical name -> version of every carried package."""
    out = {}
    for line in read_names(CARRY_FILE):
        name, _, version = line.partition("==")
        out[canonical(name)] = version
    return out


def image() -> set[str]:
    """Canonical names of the packages in the GPU image."""
    return {canonical(n) for n in read_names(IMAGE_FILE)}


def project_requirements() -> list[Requirement]:
    """The project's own run-time dependencies (``pyproject.toml``'s ``project.dependencies``)."""
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [Requirement(r) for r in doc["project"]["dependencies"]]


@dataclass
class CarryGaps:
    """What the carried wheels and the image leave missing."""

    missing: dict[str, list[str]] = field(default_factory=dict)
    """Who needs it (a carried package or ``the project``) -> requirements neither carried nor in the image."""
    versions: dict[str, str] = field(default_factory=dict)
    """Carried package -> what is wrong with its version here (not installed, or another version)."""

    def __bool__(self) -> bool:
        return bool(self.missing or self.versions)


def check_carry() -> CarryGaps:
    """Every carried package's requirements (markers for :data:`GPU_PYTHON`) and the project's, against
    what is carried, what the image holds and :data:`NOT_IMPORTED`."""
    have, there = carried(), image()
    covered = set(have) | there | set(NOT_IMPORTED)
    gaps = CarryGaps()
    needs: dict[str, list[Requirement]] = {"the project": project_requirements()}
    for name, version in have.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            gaps.versions[name] = f"carried {version}, not installed here (its requirements unread)"
            continue
        if installed != version:
            gaps.versions[name] = f"carried {version}, {installed} installed here"
        needs[name] = [Requirement(r) for r in importlib.metadata.requires(name) or []]
    for who, reqs in needs.items():
        lacking = [
            str(r)
            for r in reqs
            if (r.marker is None or r.marker.evaluate(GPU_PYTHON)) and canonical(r.name) not in covered
        ]
        if lacking:
            gaps.missing[who] = lacking
    return gaps


def main() -> int:
    """``python -m benchmarks.gpu.carry``: print the gaps; 1 if any."""
    gaps = check_carry()
    for who, reqs in gaps.missing.items():
        print(f"{who} needs {', '.join(reqs)}: neither carried nor in the GPU image")
    for name, what in gaps.versions.items():
        print(f"{name}: {what}")
    if not gaps:
        print(f"carry complete: {len(carried())} wheels carried, {len(image())} packages in the image")
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
