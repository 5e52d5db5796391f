"""Start and stop a real Kubernetes control plane on 127.0.0.1 for the e2e tier.

Components (binaries from tests/e2e/controlplane/build.sh for the release ``SPOTSHIFT_K8S_VERSION`` names, by
default the newest the project runs on; see releases.env):
- etcd, data in a temporary directory (on /dev/shm when there is one: fsync on tmpfs is free);
- kube-apiserver: TLS with a throw-away CA, bearer-token auth (admin in system:masters; the scheduler and the
  controller-manager as their bootstrap-RBAC users), Node+RBAC authorization, the default admission plugins plus
  NodeRestriction and the Mutating/ValidatingAdmissionWebhook plugins, service-account tokens signed by a
  generated key;
- kube-controller-manager with the controllers a workload needs (deployment, replicaset, statefulset, job,
  daemonset, disruption, garbagecollector, namespace, serviceaccount, serviceaccount-token, podgc) and NOT the
  node lifecycle controller; --use-service-account-credentials as kubeadm does. The ServiceAccount admission
  plugin stays on: the serviceaccount controller gives every namespace a `default` account (pods get bound,
  projected tokens; no token Secrets since 1.24);
- kube-scheduler with a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1, the version the overlays
  ship) given by the caller, restartable with another config during a session;
- the kubelet stand-in of kubelet.py.

Every component logs into `<run dir>/logs/<component>.log` and runs as a process.py `Component`: its own
process group, SIGKILL when the thread that started it dies; `stop()` terminates each group and waits for it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import requests

from . import certs
from .api import Api, ApiError
from .kubelet import MANAGED_ANNOTATION, MANAGED_VALUE, NOT_READY_TAINT, READY_ANNOTATION, KubeletStandIn
from .process import Binaries, Component, component_env, etcd_scratch_dir, free_ports, wait_for

SCHEDULER_CONFIG_API = "kubescheduler.config.k8s.io/v1"
# kube-controller-manager's canonical controller names (cmd/kube-controller-manager/names; the short names of
# older releases are aliases, and newer controllers have none).
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "job-controller",
    "daemonset-controller",
    "disruption-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "pod-garbage-collector-controller",
    "resourceclaim-controller",
    "root-ca-certificate-publisher-controller",
)


class ControlPlane:
    """A running (after `start()`) control plane; see the module docstring."""

    def __init__(
        self,
        binaries: Binaries,
        *,
        run_dir: Path | None = None,
        scheduler_config: Mapping[str, Any] | Path | None = None,
        verbosity: int = 1,
        controllers: Sequence[str] = CONTROLLERS,
        users: Sequence[str] = (),
        audit_users: Sequence[str] = (),
        kubelet: bool = True,
    ) -> None:
        """``controllers`` are kube-controller-manager's; ``users`` more admins (system:masters), each with its
        own kubeconfig (:meth:`kubeconfig_of`); the API server writes an audit log (:attr:`audit_log`, one JSON
        event per line, level Metadata) of the requests of ``audit_users`` and of no one else; ``kubelet``
        False runs no kubelet stand-in (nodes and pods then keep the status their creator writes)."""
        self.binaries = binaries
        self.run_dir = run_dir or Path(tempfile.mkdtemp(prefix="spotshift-e2e-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir = self.run_dir / "logs"
        self.pki_dir = self.run_dir / "pki"
        self.verbosity = verbosity
        self._etcd_dir = etcd_scratch_dir()
        self.etcd_port, self.etcd_peer_port, self.apiserver_port, self.cm_port = free_ports(4)
        self.scheduler_port = 0
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.components: dict[str, Component] = {}
        self.kubelet: KubeletStandIn | None = None
        self._scheduler_restarts = 0
        self._initial_scheduler_config = scheduler_config
        self.tokens = {
            "admin": secrets.token_hex(16),
            "system:kube-controller-manager": secrets.token_hex(16),
            "system:kube-scheduler": secrets.token_hex(16),
            **{user: secrets.token_hex(16) for user in users},
        }
        self.admins = {"admin", *users}
        self.controllers = tuple(controllers)
        self.audit_users = tuple(audit_users)
        self.audit_log = self.logs_dir / "audit.log"
        self.with_kubelet = kubelet
        self.ca_path = self.pki_dir / "ca.crt"
        self.kubeconfig = self.run_dir / "admin.kubeconfig"
        self._api: Api | None = None
        self._health = requests.Session()
        self._health.trust_env = False
        self.start_seconds: float | None = None

    # ---- public surface ----------------------------------------------------------------------------------
    @property
    def api(self) -> Api:
        """The admin JSON client (one per control plane; make more with `new_api()` for other threads)."""
        if self._api is None:
            self._api = self.new_api()
        return self._api

    def new_api(self, user: str = "admin") -> Api:
        return Api(self.server, self.tokens[user], self.ca_path)

    def api_client(self) -> Any:
        """A `kubernetes.client.ApiClient` for the admin (needs the `kubernetes` package)."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = str(self.ca_path)
        configuration.api_key = {"authorization": self.tokens["admin"]}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(configuration)

    # ---- start / stop ------------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> None:
        began = time.monotonic()
        try:
            self._write_pki_and_kubeconfigs()
            self._start_etcd(timeout)
            self._start_apiserver(timeout)
            self._start_controller_manager(timeout)
            self.restart_scheduler(self._initial_scheduler_config, timeout=timeout)
            if self.with_kubelet:
                self.kubelet = KubeletStandIn(self.new_api, log_path=self.logs_dir / "kubelet-stand-in.log")
                self.kubelet.start()
            wait_for(
                lambda: self._default_service_account_ready("default"),
                timeout=timeout,
                what="the default ServiceAccount in namespace default",
                check=self.ensure_alive,
            )
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began

    def stop(self) -> None:
        """Stop everything, in reverse start order, waiting for each process group."""
        self.stop_components()
        if self._api is not None:
            self._api.close()
            self._api = None
        self._health.close()
        shutil.rmtree(self._etcd_dir, ignore_errors=True)

    def stop_components(self, timeout: float = 10.0) -> None:
        """Stop the kubelet stand-in and every component, in reverse start order (etcd last), each given ``timeout``
        seconds to exit."""
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            component = self.components.get(name)
            if component is not None:
                component.stop(timeout=timeout)

    def remove_run_dir(self) -> None:
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def ensure_alive(self) -> None:
        """Raise (with the log tail) if any started component has exited."""
        for component in self.components.values():
            component.ensure_alive()

    def health(self) -> dict[str, bool]:
        """Each component: is its process running and does its health endpoint answer ok?"""
        result: dict[str, bool] = {}
        for name, url in self.health_urls().items():
            component = self.components.get(name)
            ok = component is not None and component.alive()
            if ok:
                try:
                    verify: str | bool = str(self.ca_path) if url.startswith("https") else True
                    response = self._health.get(url, verify=verify, timeout=5, headers=self._auth(name))
                    ok = response.status_code == 200
                except requests.RequestException:
                    ok = False
            result[name] = ok
        result["kubelet-stand-in"] = self.kubelet is not None and self.kubelet.is_alive()
        return result

    def health_urls(self) -> dict[str, str]:
        return {
            "etcd": f"http://127.0.0.1:{self.etcd_port}/health",
            "kube-apiserver": f"{self.server}/readyz",
            "kube-controller-manager": f"https://127.0.0.1:{self.cm_port}/healthz",
            "kube-scheduler": f"https://127.0.0.1:{self.scheduler_port}/healthz",
        }

    def _auth(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens['admin']}"} if name == "kube-apiserver" else {}

    # ---- scheduler ---------------------------------------------------------------------------------------
    def scheduler_config(
        self,
        *,
        extenders: list[dict[str, Any]] | None = None,
        profiles: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A v1 KubeSchedulerConfiguration for this control plane (extenders/profiles optional)."""
        config: dict[str, Any] = {
            "apiVersion": SCHEDULER_CONFIG_API,
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.run_dir / "kube-scheduler.kubeconfig")},
            "leaderElection": {"leaderElect": False},
        }
        if extenders is not None:
            config["extenders"] = extenders
        if profiles is not None:
            config["profiles"] = profiles
        config.update(extra)
        return config

    def restart_scheduler(self, config: Mapping[str, Any] | Path | None = None, *, timeout: float = 60.0) -> Path:
        """(Re)start kube-scheduler with `config` (a dict, or a YAML/JSON file); None means the default.

        The config's `clientConnection.kubeconfig` is pointed at this control plane and leader election is
        turned off (a restarted scheduler would otherwise wait for its predecessor's lease to expire); it
        serves healthz and metrics on a free loopback port over TLS. Returns the path of the config file
        written into the run dir.
        """
        if isinstance(config, Path):
            import yaml

            loaded = yaml.safe_load(config.read_text())
        elif config is None:
            loaded = self.scheduler_config()
        else:
            loaded = copy.deepcopy(dict(config))
        loaded.setdefault("apiVersion", SCHEDULER_CONFIG_API)
        loaded.setdefault("kind", "KubeSchedulerConfiguration")
        loaded.setdefault("clientConnection", {})["kubeconfig"] = str(self.run_dir / "kube-scheduler.kubeconfig")
        loaded.setdefault("leaderElection", {})["leaderElect"] = False
        (secure_port,) = free_ports(1)

        previous = self.components.pop("kube-scheduler", None)
        if previous is not None:
            previous.stop()
        self._scheduler_restarts += 1
        config_path = self.run_dir / f"kube-scheduler-config-{self._scheduler_restarts}.json"
        config_path.write_text(json.dumps(loaded, indent=2))
        self.scheduler_port = secure_port
        component = Component(
            "kube-scheduler",
            [
                str(self.binaries.kube_scheduler),
                f"--config={config_path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.scheduler_port}",
                *self._serving_flags(),
                f"--v={self.verbosity}",
            ],
            self.logs_dir / "kube-scheduler.log",
        )
        self.components["kube-scheduler"] = component
        component.start()
        self._wait_healthy("kube-scheduler", timeout)
        return config_path

    # ---- nodes and namespaces ----------------------------------------------------------------------------
    def create_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        allocatable: Mapping[str, str] | None = None,
        capacity: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        unschedulable: bool = False,
        ready: bool = True,
        wait: bool = True,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """Create a Node that the kubelet stand-in keeps Ready (or NotReady with `ready=False`).

        `allocatable` defaults to cpu=4, memory=8Gi, pods=110 (keys given replace those); `capacity` defaults
        to `allocatable`. With `wait`, returns once the node is Ready (or NotReady) and, if Ready, rid of the
        not-ready taint, so the scheduler may use it straight away.
        """
        alloc = {"cpu": "4", "memory": "8Gi", "pods": "110", **(allocatable or {})}
        cap = {**alloc, **(capacity or {})}
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **(labels or {}),
        }
        node_annotations = {
            MANAGED_ANNOTATION: MANAGED_VALUE,
            READY_ANNOTATION: "true" if ready else "false",
            **(annotations or {}),
        }
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels, "annotations": node_annotations},
            "spec": {"taints": list(taints or []), "unschedulable": unschedulable},
            "status": {"capacity": cap, "allocatable": alloc},
        }
        self.api.post("/api/v1/nodes", body)
        self.api.patch(f"/api/v1/nodes/{name}/status", {"status": {"capacity": cap, "allocatable": alloc}}, "strategic")
        if not wait:
            return self.api.get(f"/api/v1/nodes/{name}")
        return wait_for(
            lambda: self._node_settled(name, ready),
            timeout=timeout,
            what=f"node {name} to become {'Ready' if ready else 'NotReady'}",
            check=self.ensure_alive,
        )

    def _node_settled(self, name: str, ready: bool) -> dict[str, Any] | None:
        node = self.api.get(f"/api/v1/nodes/{name}")
        conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions") or []}
        tainted = any(t.get("key") == NOT_READY_TAINT for t in node.get("spec", {}).get("taints") or [])
        if ready and conditions.get("Ready") == "True" and not tainted:
            return node
        if not ready and conditions.get("Ready") == "False" and tainted:
            return node
        return None

    def delete_node(self, name: str, *, remove_pods: bool = True) -> None:
        self.delete_nodes([name], remove_pods=remove_pods)

    def delete_nodes(self, names: list[str], *, remove_pods: bool = True, timeout: float = 10.0) -> None:
        """Delete nodes; first (by default) cordon them and delete their pods at once.

        Without that, pods of a deleted node stay Terminating (no stand-in serves them) until podgc collects
        them, and a cluster-wide snapshot would see them. Replacement pods a controller creates meanwhile may
        still be bound before the scheduler sees the cordon, so pods are removed until a round finds none.
        """
        present = []
        for name in names:
            try:
                if remove_pods:
                    self.api.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}})
                present.append(name)
            except ApiError as error:
                if error.status != 404:
                    raise
        deadline = time.monotonic() + timeout
        while remove_pods and present:
            removed = sum(self.force_delete_pods_on(name) for name in present)
            if not removed or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        for name in present:
            self.api.delete_if_exists(f"/api/v1/nodes/{name}")

    def create_namespace(self, name: str, *, labels: Mapping[str, str] | None = None, timeout: float = 60.0) -> None:
        """Create a namespace and wait for its `default` ServiceAccount (pods are refused before it)."""
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}}
        self.api.post("/api/v1/namespaces", body)
        wait_for(
            lambda: self._default_service_account_ready(name),
            timeout=timeout,
            what=f"the default ServiceAccount in namespace {name}",
            check=self.ensure_alive,
        )

    def delete_namespace(self, name: str, *, wait: bool = False, timeout: float = 60.0) -> None:
        self.api.delete_if_exists(f"/api/v1/namespaces/{name}")
        if wait:
            wait_for(
                lambda: not self._exists(f"/api/v1/namespaces/{name}"),
                timeout=timeout,
                what=f"namespace {name} to be deleted",
            )

    def _exists(self, path: str) -> bool:
        try:
            self.api.get(path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def _default_service_account_ready(self, namespace: str) -> bool:
        return self._exists(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")

    def service_account_token(self, namespace: str, account: str, *, seconds: int = 3600) -> str:
        """A bound token of ServiceAccount ``namespace/account`` from the TokenRequest API, as a kubelet projects
        it into a pod (the API server's audience, an expiry); there are no token Secrets since 1.24."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
        return str(self.api.post(path, body)["status"]["token"])

    def service_account_files(self, namespace: str, account: str) -> dict[str, bytes]:
        """The files of a pod's projected ``kube-api-access`` volume: ``token`` (a bound token), ``ca.crt`` (the
        ``kube-root-ca.crt`` ConfigMap the root-ca-cert-publisher controller writes) and ``namespace``."""
        ca = wait_for(
            lambda: self.api.get(f"/api/v1/namespaces/{namespace}/configmaps/kube-root-ca.crt")["data"]["ca.crt"],
            timeout=60,
            what=f"the kube-root-ca.crt ConfigMap in namespace {namespace}",
        )
        return {
            "token": self.service_account_token(namespace, account).encode(),
            "ca.crt": ca.encode(),
            "namespace": namespace.encode(),
        }

    def pods(self, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        params = {"labelSelector": selector} if selector else {}
        return list(self.api.list(f"/api/v1/namespaces/{namespace}/pods", **params))

    def delete_pod(self, namespace: str, name: str, *, timeout: float = 30.0) -> None:
        """Delete a pod at once (grace period 0) and wait until the API server no longer has it."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        self.api.delete_if_exists(path, gracePeriodSeconds=0)
        wait_for(lambda: not self._exists(path), timeout=timeout, what=f"pod {namespace}/{name} to be gone")

    def force_delete_pods_on(self, node_name: str) -> int:
        """Delete every pod bound to a node at once; returns how many there were."""
        count = 0
        for pod in self.api.list("/api/v1/pods", fieldSelector=f"spec.nodeName={node_name}"):
            meta = pod["metadata"]
            self.api.delete_if_exists(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", gracePeriodSeconds=0
            )
            count += 1
        return count

    def wait_for_deployment(self, namespace: str, name: str, *, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait until every replica of a Deployment is updated, ready and available; return its pods."""
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"

        def done() -> bool:
            deployment = self.api.get(path)
            wanted = deployment["spec"].get("replicas", 1)
            status = deployment.get("status", {})
            return (
                status.get("observedGeneration", 0) >= deployment["metadata"]["generation"]
                and status.get("updatedReplicas", 0) == wanted
                and status.get("readyReplicas", 0) == wanted
                and status.get("availableReplicas", 0) == wanted
                and status.get("replicas", 0) == wanted
            )

        wait_for(done, timeout=timeout, what=f"deployment {namespace}/{name} to be ready", check=self.ensure_alive)
        deployment = self.api.get(path)
        selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())
        return [p for p in self.pods(namespace, selector) if not p["metadata"].get("deletionTimestamp")]

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this control plane."""
        return subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=check,
            env=component_env(),
            timeout=60,
        )

    # ---- internals ---------------------------------------------------------------------------------------
    def _serving_flags(self) -> list[str]:
        return [
            f"--tls-cert-file={self.pki_dir / 'serving.crt'}",
            f"--tls-private-key-file={self.pki_dir / 'serving.key'}",
        ]

    def _write_pki_and_kubeconfigs(self) -> None:
        ca = certs.make_ca()
        ca.write(self.pki_dir, "ca")
        serving = certs.issue_cert(
            ca,
            "kube-apiserver",
            hosts=(
                "127.0.0.1",
                "localhost",
                "10.0.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
        )
        serving.write(self.pki_dir, "serving")
        private, public = certs.make_signing_key()
        (self.pki_dir / "sa.key").write_bytes(private)
        (self.pki_dir / "sa.pub").write_bytes(public)
        lines = [
            f'{token},{user},{user},"system:masters"' if user in self.admins else f"{token},{user},{user}"
            for user, token in self.tokens.items()
        ]
        (self.pki_dir / "tokens.csv").write_text("\n".join(lines) + "\n")
        for path, user in (
            (self.kubeconfig, "admin"),
            (self.run_dir / "kube-controller-manager.kubeconfig", "system:kube-controller-manager"),
            (self.run_dir / "kube-scheduler.kubeconfig", "system:kube-scheduler"),
            *((self.kubeconfig_of(user), user) for user in self.admins - {"admin"}),
        ):
            path.write_text(json.dumps(self._kubeconfig(user), indent=2))
        if self.audit_users:
            policy = {
                "apiVersion": "audit.k8s.io/v1",
                "kind": "Policy",
                "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata", "users": list(self.audit_users)}, {"level": "None"}],
            }
            (self.pki_dir / "audit-policy.json").write_text(json.dumps(policy))

    def kubeconfig_of(self, user: str) -> Path:
        """The kubeconfig of one of the ``users`` given at construction (``admin``: :attr:`kubeconfig`)."""
        return self.kubeconfig if user == "admin" else self.run_dir / f"{user}.kubeconfig"

    def _audit_flags(self) -> list[str]:
        if not self.audit_users:
            return []
        return [
            f"--audit-policy-file={self.pki_dir / 'audit-policy.json'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
        ]

    def _kubeconfig(self, user: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "e2e", "cluster": {"server": self.server, "certificate-authority": str(self.ca_path)}}
            ],
            "users": [{"name": user, "user": {"token": self.tokens[user]}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user, "namespace": "default"}}],
            "current-context": "e2e",
        }

    def _launch(self, name: str, argv: list[str]) -> Component:
        component = Component(name, argv, self.logs_dir / f"{name}.log")
        self.components[name] = component
        component.start()
        return component

    def _wait_healthy(self, name: str, timeout: float) -> None:
        url = self.health_urls()[name]
        component = self.components[name]
        verify: str | bool = str(self.ca_path) if url.startswith("https") else True

        def probe() -> bool:
            response = self._health.get(url, verify=verify, timeout=5, headers=self._auth(name))
            return response.status_code == 200

        wait_for(probe, timeout=timeout, what=f"{name} health at {url}", check=component.ensure_alive)

    def _start_etcd(self, timeout: float) -> None:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self._launch(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=e2e",
                f"--data-dir={self._etcd_dir / 'data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=e2e={peer}",
                "--initial-cluster-state=new",
                f"--initial-cluster-token=spotshift-e2e-{self.etcd_port}",
                "--log-level=warn",
                "--logger=zap",
            ],
        )
        self._wait_healthy("etcd", timeout)

    def _start_apiserver(self, timeout: float) -> None:
        pki = self.pki_dir
        self._launch(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                *self._serving_flags(),
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--api-audiences=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.0.0.0/24",
                # Endpoints may not be loopback addresses: nothing to reconcile for a loopback apiserver.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
                *self._audit_flags(),
                f"--v={self.verbosity}",
            ],
        )
        self._wait_healthy("kube-apiserver", timeout)

    def _start_controller_manager(self, timeout: float) -> None:
        pki = self.pki_dir
        self._launch(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={self.run_dir / 'kube-controller-manager.kubeconfig'}",
                f"--controllers={','.join(self.controllers)}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.cm_port}",
                *self._serving_flags(),
                "--profiling=false",
                f"--v={self.verbosity}",
            ],
        )
        self._wait_healthy("kube-controller-manager", timeout)


@contextlib.contextmanager
def running_control_plane(
    *, kind: type[ControlPlane] | None = None, start_timeout: float = 120.0, **kwargs: Any
) -> Iterator[ControlPlane]:
    """`with running_control_plane() as cp:` for scripts; keeps the run dir only if the body raised. ``kind``: a
    subclass of ControlPlane to run instead (its own keyword arguments in ``kwargs``)."""
    plane = (kind or ControlPlane)(Binaries.locate(), **kwargs)
    plane.start(timeout=start_timeout)
    failed = True
    try:
        yield plane
        failed = False
    finally:
        plane.stop()
        if failed:
            print(f"spotshift e2e: control plane logs kept in {plane.logs_dir}")
        else:
            plane.remove_run_dir()
