"""rescheduler.decode.reader: the fast loader equals the library's constructors, and refuses bad input in one line."""

from __future__ import annotations

import io
import itertools
import re
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest

from rescheduler.cluster.listing import NotServed, load_cluster
from rescheduler.decode.pods import FAST_PATH_COMPLETE, SPEC_KEYS, PodItem, PodReader
from rescheduler.decode.reader import Progress, SnapshotError, load_bytes, load_snapshot
from shared.model import PDB, Node, Pod
from shared.storage import StorageClass
from tests.support.cluster_gen import FULL, generate, write_list

ROOT = Path(__file__).resolve().parents[2]

# Pods exercising every spec part the model reads, beyond what the generator writes.
EXTRA_PODS: list[dict[str, Any]] = [
    {
        "metadata": {"name": "sidecars", "namespace": "x", "labels": {"app": "s", "tier": "t"}},
        "spec": {
            "nodeName": "n1",
            "initContainers": [
                {
                    "name": "proxy",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "100m"}},
                    "ports": [{"hostPort": 80}],
                },
                {"name": "migrate", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
            ],
            "containers": [{"name": "c", "resources": {"limits": {"cpu": "1.5", "memory": "1.5G"}}}],
            "overhead": {"cpu": "10m"},
            "resources": {"requests": {"memory": "2Gi"}},
            "volumes": [
                {"name": "scratch", "emptyDir": {"medium": "Memory"}},
                {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "h", "hostPath": {"path": "/var"}},
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    },
    {
        "metadata": {
            "generateName": "gen-",
            "labels": {"app": "a", "version": "v2"},
            "deletionTimestamp": "2024-01-01T00:00:00Z",
            "ownerReferences": [{"kind": "Job", "name": "j", "controller": False}, {"kind": "Node", "name": "n"}],
        },
        "spec": {
            "containers": [{"name": "c"}],
            "priority": -5,
            "schedulerName": "spot-scheduler",
            "nodeSelector": {"disk": "ssd"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                        ]
                    },
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 5, "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]}}
                    ],
                },
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": "db"}},
                            "namespaceSelector": {},
                            "topologyKey": "zone",
                        }
                    ]
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": "a"}},
                            "matchLabelKeys": ["version"],
                            "topologyKey": "h",
                        }
                    ]
                },
            },
            "topologySpreadConstraints": [
                {
                    "maxSkew": 2,
                    "topologyKey": "zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {},
                    "matchLabelKeys": ["version"],
                    "minDomains": 3,
                }
            ],
            "tolerations": [{"operator": "Exists"}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    },
    {
        "metadata": {"name": "gated", "namespace": "x", "labels": {"app": "g"}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "schedulingGates": [{"name": "example.com/quota"}, {"name": "example.com/zone"}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    },
    {
        "metadata": {"name": "dra", "namespace": "x", "labels": {"app": "d"}},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}],
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                {"name": "fpga", "resourceClaimName": "team-fpga"},
            ],
        },
        "status": {"phase": "Running", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "dra-gpu-x"}]},
    },
    {
        "metadata": {"name": "resizing", "namespace": "x", "labels": {"app": "r"}},
        "spec": {
            "nodeName": "n1",
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}
            ],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "PodResizeInProgress", "status": "True"}],
            "containerStatuses": [
                {
                    "name": "c",
                    "ready": True,
                    "allocatedResources": {"cpu": "2", "memory": "1Gi"},
                    "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"cpu": "2"}},
                }
            ],
            "initContainerStatuses": [{"name": "proxy", "resources": {"requests": {"cpu": "100m"}}}],
        },
    },
    {
        "metadata": {"name": "slow-start", "namespace": "x", "labels": {"app": "s"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {
            "phase": "Running",
            "startTime": "2026-03-01T10:00:00Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-03-01T10:02:05Z"}],
        },
    },
]


def _decode_pod(raw: dict[str, Any]) -> Pod:
    item = msgspec.json.decode(orjson.dumps(raw), type=PodItem)
    return PodReader().read(item)


def test_fast_path_reads_the_start_up_time_from_the_status() -> None:
    assert _decode_pod(EXTRA_PODS[-1]).start_up == 125


def test_fast_path_covers_every_pod_field() -> None:
    assert FAST_PATH_COMPLETE, "shared.model.Pod has a field rescheduler.decode.pods does not fill"


def test_fast_path_decodes_every_spec_key_the_model_reads() -> None:
    source = (ROOT / "shared" / "model.py").read_text()
    read = set(re.findall(r'\bspec\.get\("(\w+)"', source))
    read -= {"taints", "unschedulable", "selector", "minAvailable", "maxUnavailable", "unhealthyPodEvictionPolicy"}
    read -= {"nodeAffinity", "claimRef"}
    read -= {"volumeName", "storageClassName"}  # node, PDB, PV and PVC specs
    assert read <= SPEC_KEYS, f"Pod.from_api reads spec keys the loader skips: {read - SPEC_KEYS}"


EXTRA_IDS = [
    "sidecars-overhead-pod-level-volumes",
    "affinity-spread-owners-pending",
    "gated",
    "dra",
    "resizing",
    "start-up",
]


@pytest.mark.parametrize("raw", EXTRA_PODS, ids=EXTRA_IDS)
def test_fast_path_equals_from_api_on_unusual_pods(raw: dict[str, Any]) -> None:
    assert _decode_pod(raw) == Pod.from_api(raw)


def test_fast_path_equals_from_api_on_a_generated_cluster() -> None:
    items = generate(3, 30, 900, FULL)
    reader = PodReader()
    n = 0
    for raw in items:
        if raw["kind"] != "Pod":
            continue
        item = msgspec.json.decode(orjson.dumps(raw), type=PodItem)
        assert reader.read(item) == Pod.from_api(raw), raw["metadata"]["name"]
        n += 1
    assert n == 900
    assert len(reader.templates) < n  # the template cache is actually shared


def _owned(name: str, **spec: Any) -> dict[str, Any]:
    """A pod of ReplicaSet ``web-1`` (the same owner reference each time) with ``spec`` on top of a base."""
    base: dict[str, Any] = {
        "nodeName": "n1",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
        "tolerations": [{"key": "spot", "operator": "Exists"}],
    }
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": {"app": "web"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-1", "uid": "u1", "controller": True}],
        },
        "spec": {**base, **spec},
        "status": {"phase": "Running"},
    }


_ZONE_A = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
        }
    }
}
_ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def test_pods_of_one_owner_with_different_specs_are_each_read_as_their_own() -> None:
    """The owner only hints at the template: a pod of the same ReplicaSet whose spec differs (a webhook or a
    vertical autoscaler edited it) is read from its own bytes, before and after the common one."""
    raws = [
        _owned("a"),
        _owned("b", containers=[{"name": "c", "resources": {"requests": {"cpu": "2"}}}]),
        _owned("c"),
        _owned("d", affinity=_ZONE_A),
        _owned("e", affinity=_ANTI),
        _owned("f", tolerations=[]),
        _owned("g"),
    ]
    reader = PodReader()
    pods = [reader.read(msgspec.json.decode(orjson.dumps(r), type=PodItem)) for r in raws]
    assert pods == [Pod.from_api(r) for r in raws]
    assert pods[1].requests["cpu"] == 2000 and pods[0].requests["cpu"] == 500
    assert pods[3].required_affinity is not None and pods[0].required_affinity is None
    assert pods[4].pod_anti_affinity and not pods[3].pod_anti_affinity
    assert pods[5].tolerations == () and pods[6].tolerations == pods[0].tolerations


def test_pods_differing_only_in_their_node_affinity_share_the_rest_of_their_template() -> None:
    """A DaemonSet's pods: each names its node in a required node affinity, everything else is the same."""
    raws = []
    for node in ("n1", "n2", "n3"):
        pin = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                }
            }
        }
        raws.append(_owned(f"ds-{node}", nodeName=node, affinity=pin))
    reader = PodReader()
    pods = [reader.read(msgspec.json.decode(orjson.dumps(r), type=PodItem)) for r in raws]
    assert pods == [Pod.from_api(r) for r in raws]
    assert len({id(p.tolerations) for p in pods}) == 1 and len({id(p.requests) for p in pods}) == 1
    assert len({p.required_affinity for p in pods}) == 3


def test_the_reader_keeps_no_slice_of_the_input_alive() -> None:
    """A live listing decodes page after page: what the reader keeps between pods must not pin a page's bytes
    (a resizable buffer cannot grow while anything still points into it)."""
    page = bytearray(orjson.dumps(_owned("a")))
    reader = PodReader()
    item = msgspec.json.decode(page, type=PodItem)
    pod = reader.read(item)
    del item
    page.extend(b" ")  # raises BufferError if the reader still holds a slice of ``page``
    assert pod == Pod.from_api(_owned("a"))
    again = reader.read(msgspec.json.decode(orjson.dumps(_owned("b")), type=PodItem))
    assert again.requests is pod.requests  # and the template is still found


def _write(tmp_path: Path, items: list[dict[str, Any]], indent: int) -> Path:
    path = tmp_path / f"snap-{indent}.json"
    with path.open("wb") as fh:
        write_list(items, fh, indent)
    return path


@pytest.mark.parametrize("indent", [4, 2, 0], ids=["kubectl-4-spaces", "jq-2-spaces", "compact"])
def test_every_layout_loads_the_same_snapshot(tmp_path: Path, indent: int) -> None:
    items = generate(5, 12, 200, FULL)
    snap = load_snapshot(str(_write(tmp_path, items, indent)))
    nodes = {i["metadata"]["name"]: Node.from_api(i) for i in items if i["kind"] == "Node"}
    assert {info.name: info.node for info in snap} == nodes
    bound = sum(len(info.pods) for info in snap) + len(snap.pending)
    live = [i for i in items if i["kind"] == "Pod" and i["status"]["phase"] not in ("Succeeded", "Failed")]
    assert bound == len(live)
    assert [p.key for p in snap.pdbs] == [PDB.from_api(i).key for i in items if i["kind"] == "PodDisruptionBudget"]
    assert len(snap.pvs) == sum(1 for i in items if i["kind"] == "PersistentVolume")


def test_stdin_is_read_with_dash() -> None:
    data = orjson.dumps({"kind": "List", "items": generate(2, 6, 60, FULL)})
    snap = load_snapshot("-", stdin=io.BytesIO(data))
    assert len(snap) == 6


def test_a_typed_list_without_item_kinds_loads() -> None:
    # What the API server returns for GET /api/v1/nodes: items carry no kind.
    nodes = [
        {k: v for k, v in i.items() if k not in ("kind", "apiVersion")}
        for i in generate(2, 5, 40, FULL)
        if i["kind"] == "Node"
    ]
    snap = load_bytes(orjson.dumps({"kind": "NodeList", "apiVersion": "v1", "items": nodes}))
    assert len(snap) == 5


def test_the_documented_recipe_with_pv_pvc_and_storageclass_loads() -> None:
    # kubectl get nodes,pods,pdb,pv,pvc,storageclass -A -o json: a StorageClass keeps its fields at the top level.
    items = [
        {
            "kind": "StorageClass",
            "apiVersion": "storage.k8s.io/v1",
            "metadata": {"name": "gp3"},
            "provisioner": "x",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["a", "b"]}]}],
        },
        {"kind": "PersistentVolume", "apiVersion": "v1", "metadata": {"name": "pv-1"}, "spec": {}},
        {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"volumeName": "pv-1", "storageClassName": "gp3"},
        },
    ]
    snap = load_bytes(orjson.dumps({"kind": "List", "items": items}))
    assert list(snap.pvs) == ["pv-1"] and list(snap.pvcs) == ["default/c"]
    assert snap.storage_classes == {
        "gp3": StorageClass("gp3", "x", "WaitForFirstConsumer", ((("zone", frozenset({"a", "b"})),),))
    }
    typed = load_bytes(
        orjson.dumps({"kind": "StorageClassList", "items": [{k: v for k, v in items[0].items() if k != "kind"}]})
    )
    assert typed.storage_classes == snap.storage_classes


def test_a_plain_object_with_items_loads() -> None:
    items = [i for i in generate(2, 5, 40, FULL) if i["kind"] in ("Node", "Pod")]
    assert len(load_bytes(orjson.dumps({"items": items}))) == 5


def test_progress_is_shown_and_cleared() -> None:
    out = io.StringIO()
    load_bytes(orjson.dumps({"kind": "List", "items": generate(2, 5, 40, FULL)}), progress=Progress(out, interval=0))
    text = out.getvalue()
    assert "reading objects" in text and "\r" in text
    assert text.endswith("\r")  # the line is cleared at the end


NODE = {"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "1"}}}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"{not json", "not valid JSON", id="bad-json"),
        pytest.param(b'{"kind": "List", "items": [', "not valid JSON", id="truncated"),
        pytest.param(b"[1, 2]", "expected a JSON object with items", id="top-level-array"),
        pytest.param(b'{"kind": "List"}', "expected a List with items", id="no-items"),
        pytest.param(b'{"kind": "Pod", "metadata": {"name": "x"}}', "got a Pod", id="a-single-object"),
        pytest.param(
            b'{"kind": "List", "items": [{"kind": "Service"}]}',
            "items[0].kind: unsupported kind 'Service'",
            id="unknown-kind",
        ),
        pytest.param(
            b'{"kind": "List", "items": [{"metadata": {}}]}', "items[0]: item has no kind", id="item-without-kind"
        ),
        pytest.param(
            b'{"kind": "ServiceList", "items": [{"metadata": {}}]}',
            "unsupported kind 'ServiceList'",
            id="unsupported-list",
        ),
        pytest.param(
            orjson.dumps({"kind": "List", "items": [{**NODE, "status": {"allocatable": {"cpu": "lots"}}}]}),
            "node n1: status.allocatable.cpu: quantity 'lots'",
            id="bad-node-quantity",
        ),
        pytest.param(
            orjson.dumps(
                {
                    "kind": "List",
                    "items": [
                        {
                            "kind": "Pod",
                            "metadata": {"name": "p", "namespace": "ns"},
                            "spec": {"containers": [{"resources": {"requests": {"cpu": "1x"}}}]},
                        }
                    ],
                }
            ),
            "pod ns/p: spec.containers[0].resources.requests.cpu: quantity '1x'",
            id="bad-pod-quantity",
        ),
        pytest.param(
            orjson.dumps({"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]}),
            "pod default/p: spec is missing",
            id="pod-without-spec",
        ),
        pytest.param(
            orjson.dumps({"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": 5}, "spec": {}}]}),
            "items[0].metadata.name",
            id="wrong-type",
        ),
        pytest.param(
            orjson.dumps({"kind": "List", "items": [{**NODE, "spec": {"taints": [1]}}]}),
            "items[0] (Node): malformed object",
            id="malformed-taints",
        ),
    ],
)
def test_bad_input_is_one_clear_line(data: bytes, expected: str) -> None:
    with pytest.raises(SnapshotError) as err:
        load_bytes(data, source="snap.json")
    message = str(err.value)
    assert message.startswith("snapshot snap.json: ")
    assert expected in message
    assert "\n" not in message


def test_missing_and_empty_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="cannot be read"):
        load_snapshot(str(tmp_path / "nope.json"))
    (tmp_path / "empty.json").write_bytes(b"")
    with pytest.raises(SnapshotError, match="is empty"):
        load_snapshot(str(tmp_path / "empty.json"))


# --- a live cluster, through a fake transport ----------------------------------------------------------


class FakeApi:
    """Serves lists page by page (``limit``/``continue``); optionally lacks policy/v1."""

    def __init__(self, items: list[dict[str, Any]], *, v1_pdbs: bool = True) -> None:
        self.by_path: dict[str, list[dict[str, Any]]] = {}
        paths = {
            "Node": "/api/v1/nodes",
            "Pod": "/api/v1/pods",
            "Namespace": "/api/v1/namespaces",
            "PersistentVolume": "/api/v1/persistentvolumes",
            "PersistentVolumeClaim": "/api/v1/persistentvolumeclaims",
            "StorageClass": "/apis/storage.k8s.io/v1/storageclasses",
            "PodDisruptionBudget": "/apis/policy/v1/poddisruptionbudgets"
            if v1_pdbs
            else "/apis/policy/v1beta1/poddisruptionbudgets",
        }
        for p in paths.values():
            self.by_path[p] = []
        for item in items:
            stripped = {k: v for k, v in item.items() if k not in ("kind", "apiVersion")}
            self.by_path[paths[item["kind"]]].append(stripped)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, path: str, query: list[tuple[str, Any]]) -> bytes:
        q = dict(query)
        self.calls.append((path, q))
        if path not in self.by_path:
            raise NotServed(path)
        items = self.by_path[path]
        if path == "/api/v1/pods":
            assert q["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
            items = [i for i in items if i["status"]["phase"] not in ("Succeeded", "Failed")]
        start = int(q.get("continue", 0))
        limit = int(q["limit"])
        page = items[start : start + limit]
        token = str(start + limit) if start + limit < len(items) else ""
        return orjson.dumps({"kind": "List", "metadata": {"continue": token}, "items": page})


@pytest.mark.parametrize("v1_pdbs", [True, False], ids=["policy-v1", "policy-v1beta1-fallback"])
def test_live_cluster_is_listed_page_by_page(v1_pdbs: bool) -> None:
    items = generate(4, 10, 300, FULL)
    api = FakeApi(items, v1_pdbs=v1_pdbs)
    snap = load_cluster(fetch=api, page_size=50)
    from_file = load_bytes(orjson.dumps({"kind": "List", "items": items}))
    assert {i.name: sorted(p.key for p in i.pods) for i in snap} == {
        i.name: sorted(p.key for p in i.pods) for i in from_file
    }
    assert len(snap.pdbs) == len(from_file.pdbs) > 0
    pod_pages = [q for path, q in api.calls if path == "/api/v1/pods"]
    assert len(pod_pages) > 2 and "continue" in pod_pages[-1]


def test_live_cluster_errors_are_one_line() -> None:
    def broken(path: str, query: list[tuple[str, Any]]) -> bytes:
        return b"<html>oops"

    with pytest.raises(SnapshotError, match=r"^cluster: unexpected response"):
        load_cluster(fetch=broken)


def _compact_read(reader: PodReader, raw: dict[str, Any]) -> Pod:
    return reader.read(msgspec.json.decode(orjson.dumps(raw), type=PodItem))


@pytest.mark.parametrize("raw", EXTRA_PODS, ids=EXTRA_IDS)
def test_the_compact_reader_equals_from_api_on_unusual_pods(raw: dict[str, Any]) -> None:
    assert _compact_read(PodReader(compact=True), raw) == Pod.from_api(raw)


def test_the_compact_reader_equals_from_api_on_a_generated_cluster_and_shares_the_parts() -> None:
    reader = PodReader(compact=True)
    pods = [(raw, _compact_read(reader, raw)) for raw in generate(3, 30, 900, FULL) if raw["kind"] == "Pod"]
    for raw, pod in pods:
        assert pod == Pod.from_api(raw), raw["metadata"]["name"]
    assert not reader.templates, "a compact reader keeps no whole templates"
    owned = [p for _, p in pods if p.controller is not None and p.controller.kind == "ReplicaSet"]
    first, second = next((a, b) for a, b in itertools.pairwise(owned) if a.controller == b.controller)
    assert first.requests is second.requests and first.tolerations is second.tolerations
    assert first.labels is second.labels


def _replica(template: int, i: int) -> dict[str, Any]:
    """Pod ``i`` of a Deployment's ``template``-th revision: each revision asks for a different CPU."""
    rs = f"web-{template}"
    return {
        "metadata": {
            "name": f"{rs}-{i}",
            "namespace": "shop",
            "labels": {"app": "web", "pod-template-hash": str(template)},
            "ownerReferences": [{"kind": "ReplicaSet", "name": rs, "uid": rs, "controller": True}],
        },
        "spec": {
            "nodeName": f"n{i}",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": f"{100 + template}m"}}}],
            "tolerations": [{"key": f"t{template}", "operator": "Exists"}],
        },
        "status": {"phase": "Running"},
    }


def test_pruning_drops_the_parts_no_pod_holds_and_keeps_the_others() -> None:
    reader = PodReader(compact=True)
    old = [_compact_read(reader, _replica(1, i)) for i in range(3)]
    kept = [_compact_read(reader, _replica(2, i)) for i in range(3)]
    reader.prune(kept)
    assert _compact_read(reader, _replica(2, 9)).requests is kept[0].requests, "a part in use stays shared"
    assert _compact_read(reader, _replica(1, 9)).requests is not old[0].requests, "a part no pod held went"


def test_a_reader_pruned_as_its_pods_are_replaced_keeps_no_more_than_for_the_last_pods() -> None:
    reader = PodReader(compact=True)
    for revision in range(40):  # forty rollouts, each replacing every pod
        pods = [_compact_read(reader, _replica(revision, i)) for i in range(5)]
        reader.prune(pods)
    fresh = PodReader(compact=True)
    for i in range(5):
        _compact_read(fresh, _replica(39, i))
    assert reader.size() == fresh.size()
