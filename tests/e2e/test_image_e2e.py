"""The container image, run as its manifests run it: the demo scenario with both servers started from the image.

``deploy/overlays/gke`` (the demo's provider) is rendered with kustomize; spot-extender and spot-rescheduler
are started from the image (:mod:`tests.support.image`: read-only root, ``/tmp`` a tmpfs, the pod's volumes,
user 65532, in-cluster credentials from a real ServiceAccount token) with the **command of the rendered
Deployment, unchanged**, followed only by:

- the listen address (``--bind``, ``--listen-address``) on a free loopback port, since these processes share
  the host's network with other test runs on the machine;
- for the rescheduler, the demo's short intervals and JSON logs (:data:`demo.stack.DEMO_RESCHEDULER_FLAGS`:
  the shipped 10-minute ``--node-drain-delay`` would make the scenario last half an hour).

Their API identities are the rendered ServiceAccounts with the rendered (Cluster)Roles and bindings applied to
the control plane, so a rule the servers need but the manifests lack fails here. The scenario is the demo's
(``demo/scenario.py``); its outcome must hold: an on-demand node emptied onto spot, no pod lost.

The image comes from ``deploy/image/build.sh`` (``tests/run.sh`` builds it); without it the tests fail with
the build command, unless ``SPOTSHIFT_SKIP_IMAGE=1``.
"""

from __future__ import annotations

import io
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from demo.scenario import Demo, Options, demo_config
from demo.stack import DEMO_RESCHEDULER_FLAGS, SCHEDULER_NAME, SPOTSHIFT_NAMESPACE, Stack
from tests.support.controlplane import ApiError, Binaries, BinariesMissing
from tests.support.image import (
    Container,
    ImageUnavailable,
    Mount,
    OpenedImage,
    base_image_name,
    container_env,
    image_name,
    image_size_bytes,
    pod_spec,
    project_version,
    render,
    secret_files,
    with_last_flags,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy/overlays/gke"
MAX_ADDED_BYTES = 150e6
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
RBAC_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}


@pytest.fixture(scope="module")
def image() -> Iterator[OpenedImage]:
    if os.environ.get("SPOTSHIFT_SKIP_IMAGE") == "1":
        pytest.skip("SPOTSHIFT_SKIP_IMAGE=1: the image tests are skipped")
    try:
        opened = OpenedImage(image_name())
    except ImageUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(scope="module")
def rendered() -> dict[tuple[str, str], dict[str, Any]]:
    try:
        return render(OVERLAY)
    except ImageUnavailable as e:
        pytest.fail(str(e), pytrace=False)


# ---- the image itself ---------------------------------------------------------------------------------------


def test_the_image_runs_its_three_commands_as_non_root_on_a_read_only_root(image: OpenedImage) -> None:
    who = image.run(Container(argv=("id", "-u")))
    assert who.returncode == 0, who.stderr
    assert who.stdout.strip() == "65532"
    assert image.config["User"] == "65532:65532", "numeric, so runAsNonRoot can be checked without a passwd entry"
    for command, usage in (
        ("spot-extender", "usage: spot-extender"),
        ("spot-rescheduler", "usage: spot-rescheduler"),
        ("spot-certs", "usage: spot-certs"),
    ):
        done = image.run(Container(argv=(command, "--help")))
        assert done.returncode == 0 and done.stdout.startswith(usage), (command, done.stderr[-2000:])
    probe = image.run(Container(argv=("sh", "-c", "touch /opt/spotshift/x || echo read-only; touch /tmp/x && pwd")))
    assert "read-only" in probe.stdout and "Read-only file system" in probe.stderr
    assert probe.stdout.strip().endswith("/tmp"), "WORKDIR is the one writable place"


def test_the_image_carries_its_version_and_no_build_tools(image: OpenedImage) -> None:
    labels = image.config["Labels"]
    assert labels["org.opencontainers.image.version"] == project_version()
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"].startswith("https://")
    venv = image.rootfs / "opt/spotshift"
    site = next(venv.glob("lib/python3*/site-packages"))
    assert not (venv / "bin/pip").exists() and not list(site.glob("pip-*")), "no pip in the runtime image"
    assert not (site / "kubernetes/aio").exists()
    for tool in ("gcc", "cc", "make"):
        assert not (image.rootfs / "usr/bin" / tool).exists(), tool
    assert not (image.rootfs / "run/secrets/cacert").exists(), "the build's CA secret is never baked in"
    assert not (image.rootfs / "src").exists(), "no source tree in the runtime image"


def test_the_image_adds_at_most_150_mb_to_its_base(image: OpenedImage) -> None:
    base = base_image_name()
    try:
        added = image_size_bytes(image.name) - image_size_bytes(base)
    except ImageUnavailable as e:
        pytest.fail(f"{e}: the test measures an image built on deploy/image/base.sh's base", pytrace=False)
    print(f"image {image.name}: adds {added / 1e6:.0f} MB to {base}")
    assert 0 < added <= MAX_ADDED_BYTES


# ---- the demo scenario, both servers from the image ------------------------------------------------------


class ImageStack(Stack):
    """The demo's stack with spot-extender and spot-rescheduler run from the image, as their Deployments say."""

    def __init__(self, work: Path, config: dict[str, Any], *, image: OpenedImage, docs: dict[Any, Any]) -> None:
        super().__init__(work, config)
        self.image = image
        self.docs = docs
        self.commands: dict[str, tuple[str, ...]] = {}

    # The rendered RBAC, applied once the namespace exists; tokens as a kubelet would mount them.
    def apply_rbac(self) -> None:
        assert self.plane is not None
        api = self.plane.api
        for (kind, name), doc in self.docs.items():
            if kind not in RBAC_PATHS or (kind == "ServiceAccount" and name == "default"):
                continue
            path = RBAC_PATHS[kind].format(ns=doc["metadata"].get("namespace", SPOTSHIFT_NAMESPACE))
            try:
                api.post(path, doc)
            except ApiError as e:
                if e.status != 409:
                    raise

    def token_volume(self, account: str) -> Path:
        assert self.plane is not None
        files = self.plane.service_account_files(SPOTSHIFT_NAMESPACE, account)
        return secret_files(self.work / "volumes" / account / "serviceaccount", files, 0o644, None)

    def container(self, deployment: str, overrides: tuple[str, ...], volumes: dict[str, Path]) -> Container:
        spec = pod_spec(self.docs, deployment)
        (c,) = spec["containers"]
        assert c["image"] == f"ghcr.io/spotshift/spotshift:{project_version()}"
        assert spec["automountServiceAccountToken"] is True
        mounts = [Mount(volumes[m["name"]], m["mountPath"]) for m in c["volumeMounts"] if m["name"] in volumes]
        mounts.append(Mount(self.token_volume(spec["serviceAccountName"]), SA_DIR))
        assert self.plane is not None
        env = {
            **container_env(c, {"spec.nodeName": "image-e2e-host", "metadata.name": f"{deployment}-image-e2e"}),
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.plane.apiserver_port),
            "HOSTNAME": f"{deployment}-image-e2e",
        }
        security = spec["securityContext"]
        argv = with_last_flags(c["command"], overrides)
        self.commands[deployment] = argv
        return Container(
            argv=argv,
            env=env,
            mounts=tuple(mounts),
            user=security["runAsUser"],
            group=security["runAsGroup"],
            supplementary_groups=(security["fsGroup"],) if "fsGroup" in security else (),
        )

    def config_volume(self) -> Path:
        """The ConfigMap volume: the demo's configuration (the rendered ConfigMap with the demo's scheduler)."""
        directory = self.work / "volumes" / "config"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.yaml").write_text(self.config_path.read_text())
        return directory

    def tls_volume(self, deployment: str) -> Path:
        spec = pod_spec(self.docs, deployment)
        (secret,) = [v["secret"] for v in spec["volumes"] if v.get("secret", {}).get("secretName") == "spotshift-tls"]
        files = {n: (self.certs / n).read_bytes() for n in ("tls.crt", "tls.key", "ca.crt")}
        group = spec["securityContext"].get("fsGroup")
        return secret_files(self.work / "volumes" / deployment / "tls", files, secret["defaultMode"], group)

    def extender_command(self) -> list[str]:
        self.apply_rbac()
        container = self.container(
            "spotshift-webhook",
            (f"--bind=127.0.0.1:{self.extender_port}",),
            {"tls": self.tls_volume("spotshift-webhook"), "config": self.config_volume()},
        )
        return self.image.command(container)

    def rescheduler_command(self) -> list[str]:
        container = self.container(
            "spotshift-rescheduler",
            (f"--listen-address=127.0.0.1:{self.metrics_port}", *DEMO_RESCHEDULER_FLAGS),
            {"config": self.config_volume()},
        )
        return self.image.command(container)


def test_the_demo_scenario_holds_with_both_servers_run_from_the_image(
    image: OpenedImage, rendered: dict[tuple[str, str], dict[str, Any]], tmp_path: Path
) -> None:
    try:
        Binaries.locate()
    except BinariesMissing as error:
        pytest.fail(str(error), pytrace=False)
    volumes = pod_spec(rendered, "spotshift-webhook")["volumes"]
    (config_map,) = [v["configMap"]["name"] for v in volumes if "configMap" in v]
    shipped = yaml.safe_load(rendered[("ConfigMap", config_map)]["data"]["config.yaml"])
    expected = demo_config()
    assert expected["webhook"].pop("scheduler_name") == SCHEDULER_NAME
    shipped["webhook"].pop("scheduler_name")
    assert shipped == expected, "the demo runs the rendered ConfigMap's configuration, with the second scheduler"

    stacks: list[ImageStack] = []

    def factory(work: Path, config: dict[str, Any]) -> Stack:
        stacks.append(ImageStack(work, config, image=image, docs=rendered))
        return stacks[-1]

    out = io.StringIO()
    started = time.monotonic()
    code = Demo(Options(plain=True, timeout=240, work_dir=tmp_path / "work"), out=out, stack_factory=factory).run()
    text = out.getvalue()
    logs = tmp_path / "work" / "logs"

    def tail(name: str, chars: int | None = 3000) -> str:
        path = logs / name
        text = path.read_text(errors="replace") if path.exists() else "(no log)"
        return text[-chars:] if chars else text

    assert code == 0, f"{text[-4000:]}\n--- spot-extender\n{tail('spot-extender.log')}"
    emptied = re.search(r"nodes emptied: (\d+) of (\d+) on-demand nodes drained onto spot", text)
    assert emptied and int(emptied[1]) >= 1, text[-3000:]
    assert "no pod lost: every Deployment back at its desired Ready count" in text
    assert "RESULT: PASS" in text and "no process left running" in text
    # The rendered RBAC is all they had: a call it does not allow is answered 403, which both servers log.
    for name in ("spot-extender.log", "spot-rescheduler.log"):
        denied = [line for line in tail(name, None).splitlines() if "forbidden" in line.lower() or "HTTP 403" in line]
        assert not denied, f"{name}: calls the rendered RBAC refuses:\n" + "\n".join(denied[:5])

    (stack,) = stacks
    for deployment, overrides in (
        ("spotshift-webhook", 1),
        ("spotshift-rescheduler", 1 + len(DEMO_RESCHEDULER_FLAGS)),
    ):
        (c,) = pod_spec(rendered, deployment)["containers"]
        argv = stack.commands[deployment]
        assert argv[: len(c["command"])] == tuple(c["command"]), "the rendered command, unchanged"
        assert len(argv) == len(c["command"]) + overrides
    assert "--no-pod-cache" in stack.commands["spotshift-webhook"]
    print(f"demo from the image: {time.monotonic() - started:.0f}s, {emptied[1]} of {emptied[2]} nodes emptied")
