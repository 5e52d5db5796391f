"""Run spotshift's container image the way a kubelet would, without a container engine.

The image built by ``deploy/image/build.sh`` is opened with buildah (``buildah from`` + ``buildah mount``: its
root filesystem as a directory). Each process then runs in a mount namespace of its own (``unshare --mount``)
where that directory is bind-mounted **read-only**, ``/tmp`` is a fresh tmpfs (the manifests' emptyDir), the
pod's volumes (the TLS Secret with its ``defaultMode``, the ConfigMap, the ServiceAccount token) are bound to
their ``mountPath``, and ``chroot --userspec`` drops to the pod's ``runAsUser``/``runAsGroup`` with ``fsGroup``
as a supplementary group. The environment is the image's plus the container's ``env`` plus what a kubelet
injects for in-cluster API access (``KUBERNETES_SERVICE_HOST``/``PORT``). The network is the host's: the
control plane listens on 127.0.0.1. The process keeps the PID ``Popen`` returns (every step ``exec``s the
next), so signals reach it directly; its mounts vanish with its namespace.

Needs root (mount namespaces, chroot, buildah's storage), ``buildah`` and util-linux's ``unshare``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from tests.support.controlplane.process import Binaries, BinariesMissing

ROOT = Path(__file__).resolve().parents[2]
BUILD_HINT = 'bash deploy/image/build.sh --base "$(bash deploy/image/base.sh)"'


class ImageUnavailable(Exception):
    """The image (or what is needed to run it) is not there; the message says how to get it."""


def project_version() -> str:
    import tomllib

    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def image_name() -> str:
    """``SPOTSHIFT_IMAGE``, else the name build.sh tags and deploy/ refers to."""
    return os.environ.get("SPOTSHIFT_IMAGE") or f"ghcr.io/spotshift/spotshift:{project_version()}"


def _buildah(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["buildah", *args], capture_output=True, text=True, check=check, timeout=300)


def base_image_name() -> str:
    """The local base ``deploy/image/base.sh`` makes (its ``IMAGE=`` line: one place for the name)."""
    found = re.search(r"^IMAGE=(\S+)$", (ROOT / "deploy/image/base.sh").read_text(), re.MULTILINE)
    assert found, "deploy/image/base.sh names its image on an IMAGE= line"
    return found[1]


def image_size_bytes(name: str) -> float:
    """The image's size as buildah reports it ("409 MB": decimal units, 3-4 significant digits)."""
    for entry in json.loads(_buildah("images", "--json").stdout):
        if name in (entry.get("names") or []) or any(n.endswith("/" + name) for n in entry.get("names") or []):
            number, unit = re.fullmatch(r"([\d.]+)\s*([kMGT]?B)", entry["size"]).groups()  # type: ignore[union-attr]
            return float(number) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
    raise ImageUnavailable(f"buildah has no image {name}")


def inside(rootfs: Path, path: str) -> Path:
    """``path`` as seen inside ``rootfs``: symlinks are followed within it (``/var/run`` -> ``/run``), never
    out to the host's files."""
    current = rootfs
    parts = list(PurePosixPath(path).parts[1:])
    hops = 0
    while parts:
        part = parts.pop(0)
        candidate = current / part
        if candidate.is_symlink():
            hops += 1
            if hops > 40:
                raise ValueError(f"too many symlinks resolving {path} in {rootfs}")
            target = PurePosixPath(os.readlink(candidate))
            parts = list(target.parts[1:] if target.is_absolute() else target.parts) + parts
            if target.is_absolute():
                current = rootfs
            continue
        current = candidate
    return current


@dataclass(frozen=True)
class Mount:
    """A host directory bound read-only at ``path`` inside the container."""

    source: Path
    path: str


@dataclass(frozen=True)
class Container:
    """What a pod spec says about one container, resolved for a run on this machine."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    user: int = 65532
    group: int = 65532
    supplementary_groups: tuple[int, ...] = ()


class OpenedImage:
    """A working container of the image, mounted; :meth:`close` unmounts and removes it."""

    def __init__(self, name: str) -> None:
        if os.geteuid() != 0:
            raise ImageUnavailable("running the image needs root (mount namespaces, chroot)")
        for tool in ("buildah", "unshare", "chroot"):
            if shutil.which(tool) is None:
                raise ImageUnavailable(f"{tool} is not installed; build the image with: {BUILD_HINT}")
        inspected = _buildah("inspect", "--type", "image", name, check=False)
        if inspected.returncode != 0:
            raise ImageUnavailable(f"no image {name} in buildah's storage; build it with: {BUILD_HINT}")
        self.name = name
        self.info: dict[str, Any] = json.loads(inspected.stdout)
        self.container = _buildah("from", "--pull-never", name).stdout.strip()
        try:
            self.rootfs = Path(_buildah("mount", self.container).stdout.strip())
        except BaseException:
            _buildah("rm", self.container, check=False)
            raise

    @property
    def config(self) -> dict[str, Any]:
        """The image's OCI config (User, Env, WorkingDir, Labels, ...)."""
        return dict(self.info["OCIv1"]["config"])

    def env(self) -> dict[str, str]:
        return dict(e.split("=", 1) for e in self.config.get("Env") or [])

    def close(self) -> None:
        _buildah("umount", self.container, check=False)
        _buildah("rm", self.container, check=False)

    def command(self, container: Container) -> list[str]:
        """The argv (run it as root) that starts ``container`` from this image, as described in the module
        docstring. Mount points are made in the working container's own (writable) layer first."""
        for m in container.mounts:
            inside(self.rootfs, m.path).mkdir(parents=True, exist_ok=True)
        r = shlex.quote(str(self.rootfs))
        lines = [
            "set -e",
            f"mount --bind {r} {r}",
            f"mount -o remount,bind,ro {r}",
            f"mount -t tmpfs -o mode=1777,size=64m tmpfs {r}/tmp",
            f"mount -t proc proc {r}/proc",
            f"mount --rbind /dev {r}/dev",
        ]
        for m in container.mounts:
            target = shlex.quote(str(inside(self.rootfs, m.path)))
            lines.append(f"mount --bind {shlex.quote(str(m.source))} {target}")
            lines.append(f"mount -o remount,bind,ro {target}")
        env = {**self.env(), **container.env}
        groups = ",".join(str(g) for g in (container.group, *container.supplementary_groups))
        workdir = self.config.get("WorkingDir") or "/"
        exec_line = [
            "exec",
            "env",
            "-i",
            *(f"{k}={v}" for k, v in env.items()),
            "chroot",
            f"--userspec={container.user}:{container.group}",
            f"--groups={groups}",
            str(self.rootfs),
            "/bin/sh",
            "-c",
            'cd "$0" && exec "$@"',
            workdir,
            *container.argv,
        ]
        lines.append(shlex.join(exec_line))
        return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", "\n".join(lines)]

    def run(self, container: Container, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(container), capture_output=True, text=True, timeout=timeout)


# ---- the rendered manifests -------------------------------------------------------------------------------


def kustomize_command() -> list[str]:
    """``kubectl kustomize`` of the control plane's own kubectl (built with it, same release): deploy/ is
    rendered as an operator renders it with ``kubectl apply -k``."""
    try:
        return [str(Binaries.locate().kubectl), "kustomize"]
    except BinariesMissing as error:
        raise ImageUnavailable(str(error)) from None


def render(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    out = subprocess.run([*kustomize_command(), str(path)], capture_output=True, text=True, check=True, timeout=120)
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout)}


def pod_spec(docs: Mapping[tuple[str, str], Any], deployment: str) -> dict[str, Any]:
    return dict(docs[("Deployment", deployment)]["spec"]["template"]["spec"])


def container_env(container: Mapping[str, Any], fields: Mapping[str, str]) -> dict[str, str]:
    """The container's ``env``: literal values, and downward-API ``fieldRef``s looked up in ``fields``."""
    out = {}
    for e in container.get("env") or []:
        if "value" in e:
            out[e["name"]] = str(e["value"])
        else:
            out[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return out


def secret_files(directory: Path, files: Mapping[str, bytes], mode: int, group: int | None) -> Path:
    """A Secret volume as the kubelet writes it: the files with ``defaultMode``, group ``fsGroup``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        os.chown(path, 0, group if group is not None else 0)
        path.chmod(mode)
    directory.chmod(0o755)
    return directory


def with_last_flags(argv: Sequence[str], overrides: Sequence[str]) -> tuple[str, ...]:
    """``argv`` unchanged, followed by ``overrides`` (argparse: the last occurrence of a flag wins)."""
    return (*argv, *overrides)
