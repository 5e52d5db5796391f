"""Read a cluster snapshot from a live cluster: every kind ``plan`` needs, listed page by page.

``spot-rescheduler plan`` without ``--snapshot`` (and ``kubectl spotshift plan``) plans the cluster of the
kubeconfig. Nodes, namespaces, PVs, PVCs, StorageClasses, PDBs and non-terminal pods are listed with the
project's one pager (:func:`shared.kube.informer.list_pages`: ``limit``/``continue``), and each page's raw body
is decoded by the same typed decoders as a snapshot file (:mod:`rescheduler.decode.reader`), so a live plan and
a file plan read objects alike; the Kubernetes client's model objects would be far too slow for 150,000 pods.
PDBs fall back to ``policy/v1beta1`` where the server lacks ``policy/v1`` (Kubernetes before 1.21). Karpenter's
NodePools are listed where the server serves them (a cluster without Karpenter has none); if RBAC refuses them,
the snapshot says so (:attr:`~shared.snapshot.ClusterSnapshot.node_pools_problem`) and the plan leaves
Karpenter's nodes alone. Read only: nothing in the cluster changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from msgspec import Raw, Struct

from rescheduler.decode.pods import NONE
from rescheduler.decode.reader import LIST_DECODERS, Progress, SnapshotError, SnapshotReader, json_problem
from shared.kube.informer import Page, list_pages
from shared.model import ParseError
from shared.snapshot import ClusterSnapshot

__all__ = ["NotServed", "Refused", "Fetch", "list_kind", "load_cluster", "raw_page", "NODEPOOLS_PATH"]


class _ListMeta(Struct):
    # ``continue`` is a Python keyword, hence the rename.
    continue_: str | None = msgspec.field(default=None, name="continue")
    resourceVersion: str | None = None


class _Page(Struct):
    metadata: _ListMeta | None = None
    items: Raw = NONE


_PAGE = msgspec.json.Decoder(_Page)

# (kind, path, api version given to from_api): PDBs fall back to policy/v1beta1 (Kubernetes < 1.21).
_RESOURCES = (
    ("Node", "/api/v1/nodes", None),
    ("Namespace", "/api/v1/namespaces", None),
    ("PersistentVolume", "/api/v1/persistentvolumes", None),
    ("PersistentVolumeClaim", "/api/v1/persistentvolumeclaims", None),
    ("StorageClass", "/apis/storage.k8s.io/v1/storageclasses", None),
    ("PodDisruptionBudget", "/apis/policy/v1/poddisruptionbudgets", "policy/v1"),
    ("Pod", "/api/v1/pods", None),
)
_PDB_V1BETA1 = "/apis/policy/v1beta1/poddisruptionbudgets"
NODEPOOLS_PATH = "/apis/karpenter.sh/v1/nodepools"
"""Karpenter's NodePools: listed where served, optional (:mod:`shared.nodepools`)."""

Fetch = Callable[[str, list[tuple[str, Any]]], bytes]
"""``fetch(path, query) -> raw response body``; raises :class:`NotServed` for HTTP 404, :class:`Refused` for 403."""


class NotServed(Exception):
    """The API server does not serve this path (HTTP 404)."""


class Refused(Exception):
    """The API server refuses this path to these credentials (HTTP 403)."""


def raw_page(body: bytes) -> Page[Raw]:
    """A page with its items left as raw bytes, for the kind's typed decoder."""
    page = _PAGE.decode(body)
    meta = page.metadata or _ListMeta()
    return Page(page.items, meta.continue_ or "", meta.resourceVersion or "")


def list_kind(
    fetch: Fetch,
    kind: str,
    path: str,
    reader: SnapshotReader,
    *,
    page_size: int,
    query: Sequence[tuple[str, Any]] = (),
    api_version: str | None = None,
) -> int:
    """List one resource page by page, adding each item to ``reader``; returns the item count."""
    count = 0
    decoder = LIST_DECODERS[kind]
    for page in list_pages(lambda q: fetch(path, list(q)), raw_page, page_size=page_size, query=query):
        items = decoder.decode(page.items) if bytes(page.items) not in (b"", b"null") else []
        for item in items:
            try:
                reader.add(kind, item, api_version)
            except ParseError:
                raise
            except (TypeError, AttributeError, ValueError, KeyError, IndexError) as e:
                raise ParseError(f"{kind}: malformed object: {e}") from None
        count += len(items)
        reader.progress.phase(f"listing {kind} objects: {count:,}")
    return count


def load_cluster(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    page_size: int = 500,
    progress: Progress | None = None,
    fetch: Fetch | None = None,
) -> ClusterSnapshot:
    """List nodes, namespaces, PVs, PVCs, StorageClasses, PDBs and non-terminal pods into a snapshot.

    ``fetch`` replaces the HTTP layer (tests); by default the kubeconfig (or the in-cluster service
    account when there is no kubeconfig) configures a Kubernetes ``ApiClient`` used only for raw GETs.
    """
    progress = progress if progress is not None else Progress(enabled=False)
    if fetch is None:
        fetch = _client_fetch(kubeconfig, context)
    reader = SnapshotReader(progress)
    try:
        for kind, path, api_version in _RESOURCES:
            query: list[tuple[str, Any]] = []
            if kind == "Pod":
                # Finished pods hold no resources and are never moved: do not transfer them at all.
                query = [("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")]
            try:
                list_kind(fetch, kind, path, reader, page_size=page_size, query=query, api_version=api_version)
            except NotServed:
                if kind != "PodDisruptionBudget":
                    raise
                list_kind(fetch, kind, _PDB_V1BETA1, reader, page_size=page_size, api_version="policy/v1beta1")
        _list_node_pools(fetch, reader, page_size)
    except NotServed as e:
        raise SnapshotError(f"cluster: {e} is not served by the API server") from None
    except Refused as e:
        raise SnapshotError(f"cluster: GET {e}: forbidden") from None
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise SnapshotError(f"cluster: unexpected response: {json_problem(e)}") from None
    except ParseError as e:
        raise SnapshotError(f"cluster: {e}") from None
    progress.phase(f"indexing {len(reader.parts.pods):,} pods on {len(reader.parts.nodes):,} nodes")
    snap = reader.parts.snapshot()
    progress.done()
    return snap


def _list_node_pools(fetch: Fetch, reader: SnapshotReader, page_size: int) -> None:
    """Karpenter's NodePools: none where the server does not serve them, the reason where RBAC refuses them."""
    try:
        list_kind(fetch, "NodePool", NODEPOOLS_PATH, reader, page_size=page_size)
    except NotServed:
        reader.parts.node_pools.clear()
    except Refused:
        reader.parts.node_pools.clear()
        reader.parts.node_pools_problem = (
            f"forbidden: RBAC needs list and watch on nodepools.karpenter.sh ({NODEPOOLS_PATH})"
        )


def _client_fetch(kubeconfig: str | None, context: str | None) -> Fetch:
    """Raw GETs through :mod:`shared.kube.api`, spotshift's one door to the API server."""
    from rescheduler.cluster import USER_AGENT
    from shared.kube.api import ApiError, Forbidden, Kube, KubeconfigError, transport_from_kubeconfig
    from shared.kube.api import NotFound as ApiNotFound

    try:
        kube = Kube(transport_from_kubeconfig(kubeconfig, context, user_agent=USER_AGENT))
    except KubeconfigError as e:
        raise SnapshotError(f"cluster: {e}") from None

    def fetch(path: str, query: list[tuple[str, Any]]) -> bytes:
        try:
            return kube.get_raw(path, query)
        except ApiNotFound:
            raise NotServed(path) from None
        except Forbidden:
            raise Refused(path) from None
        except ApiError as e:
            raise SnapshotError(f"cluster: GET {path}: {' '.join(str(e).split())}") from None

    return fetch
