"""A snapshot file read by two processes (:mod:`rescheduler.decode.split`): the same parts as one process
reads, in the same order; any other layout, or any problem in either half, falls back to the one-process read
(which words the error as always). Real forked processes and real files."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import pytest

from rescheduler.cli import main
from rescheduler.decode import reader, split
from rescheduler.decode.reader import Progress, SnapshotError, SnapshotParts, load_snapshot, read_tagged
from tests.support.cluster_gen import FULL, PDB_HEAVY, generate, write_list
from tests.unit.test_snapshot_reader import EXTRA_PODS

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the platform cannot fork")

_STORAGE_CLASS = {
    "kind": "StorageClass",
    "apiVersion": "storage.k8s.io/v1",
    "metadata": {"name": "zonal"},
    "provisioner": "ebs.csi.aws.com",
    "volumeBindingMode": "WaitForFirstConsumer",
    "allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}],
}


def _items(seed: int, nodes: int = 30, pods: int = 900, features: Any = FULL) -> list[dict[str, Any]]:
    items = generate(seed, nodes, pods, features)
    extra = [{"kind": "Pod", "apiVersion": "v1", **p} for p in EXTRA_PODS]
    # Unusual pods and a StorageClass at both ends, so each half holds some.
    return [*extra, _STORAGE_CLASS, *items, *extra, {**_STORAGE_CLASS, "metadata": {"name": "other"}}]


def _file(tmp_path: Path, items: list[dict[str, Any]], indent: int = 4) -> Path:
    path = tmp_path / f"snap-{indent}.json"
    with path.open("wb") as fh:
        write_list(items, fh, indent)
    return path


def _read(path: Path) -> SnapshotParts | None:
    with path.open("rb") as fh:
        return split.read_in_two(
            fh.fileno(), path.stat().st_size, lambda half, first: read_tagged(half, first_half=first), min_bytes=0
        )


def _fields(parts: SnapshotParts) -> dict[str, list[Any]]:
    names = ("nodes", "pods", "pdbs", "namespaces", "pvs", "pvcs", "storage_classes")
    return {n: getattr(parts, n) for n in names}


@pytest.mark.parametrize(("seed", "features"), [(21, FULL), (22, PDB_HEAVY)])
def test_two_processes_read_what_one_reads_in_the_same_order(tmp_path: Path, seed: int, features: Any) -> None:
    path = _file(tmp_path, _items(seed, features=features))
    one = read_tagged(path.read_bytes())
    two = _read(path)
    assert two is not None
    assert _fields(two) == _fields(one)
    assert len(two.pods) == len(one.pods) > 900 and len(two.storage_classes) == 2
    # Pods of one template share their parts within each half, as in a one-process read.
    by_requests = {id(p.requests) for p in two.pods}
    assert len(by_requests) < len(two.pods) // 4


def test_the_cut_is_between_two_items_after_the_share() -> None:
    items = [{"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": f"ns-{i}"}} for i in range(40)]
    buf = io.BytesIO()
    write_list(items, buf, 4)
    data = buf.getvalue()
    end = split.split_point(data, min_bytes=0)
    assert end is not None and end >= len(data) * split.FIRST_SHARE
    assert data[end : end + 2] == b"},"  # the last item of the first half ends here
    assert data[end + 1 : end + 12] == b",\n        {"


@pytest.mark.parametrize("indent", [2, 0], ids=["jq-2-spaces", "compact"])
def test_another_layout_is_not_cut(tmp_path: Path, indent: int) -> None:
    path = _file(tmp_path, _items(23), indent)
    assert split.split_point(path.read_bytes(), min_bytes=0) is None
    assert _read(path) is None


def test_a_small_file_is_not_cut(tmp_path: Path) -> None:
    path = _file(tmp_path, _items(24))
    assert split.split_point(path.read_bytes()) is None  # below MIN_BYTES


def test_a_cut_outside_the_items_array_is_refused(tmp_path: Path) -> None:
    """kubectl's layout with the items ended early and another top-level array of objects after them: the
    first half then holds a key other than ``apiVersion`` and ``items``, and the file is read in one piece."""
    items = _items(25, nodes=4, pods=20)
    path = _file(tmp_path, items)
    text = path.read_bytes()
    tail = text.rindex(b'\n    ],\n    "kind"')
    one = b'        {\n            "kind": "Namespace",\n            "metadata": {\n                "name": "x%d"\n'
    one += b"            }\n        }"
    padding = b",\n".join(one % i for i in range(3 * len(text) // len(one)))  # the cut falls in it
    cut = tail + len(b"\n    ],")
    odd = text[:cut] + b'\n    "other": [\n' + padding + b"\n    ]," + text[cut:]
    path.write_bytes(odd)
    end = split.split_point(odd, min_bytes=0)
    assert end is not None and end > tail  # the bytes alone would be cut in "other"...
    assert _read(path) is None  # ...but the first half is not a list's beginning


@pytest.mark.parametrize("where", ["first", "second"])
def test_a_bad_item_in_either_half_falls_back_and_is_worded_as_always(tmp_path: Path, where: str) -> None:
    items = _items(26)
    bad = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "broken", "namespace": "x"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]},
    }
    items.insert(3 if where == "first" else len(items) - 3, bad)
    path = _file(tmp_path, items)
    assert _read(path) is None
    with pytest.raises(SnapshotError) as two:
        load_snapshot(str(path), workers=2)
    with pytest.raises(SnapshotError) as one:
        load_snapshot(str(path), workers=1)
    assert str(two.value) == str(one.value)
    assert "pod x/broken" in str(one.value)


def _big_file(tmp_path: Path) -> Path:
    """A file above :data:`~rescheduler.decode.split.MIN_BYTES`: a small cluster whose pods carry kubectl's
    last-applied-configuration, as big as some do."""
    items = generate(27, 40, 900, PDB_HEAVY)
    for item in items:
        if item["kind"] == "Pod":
            annotations = item["metadata"].setdefault("annotations", {})
            annotations["kubectl.kubernetes.io/last-applied-configuration"] = "x" * 80_000
    path = tmp_path / "big.json"
    with path.open("wb") as fh:
        write_list(items, fh, 4)
    assert path.stat().st_size >= split.MIN_BYTES
    return path


def test_only_the_reader_of_the_first_half_shows_progress(tmp_path: Path) -> None:
    """Both processes share the terminal: the child stays quiet, or the progress line would be garbled."""
    path = _big_file(tmp_path)
    log = tmp_path / "progress.txt"
    with log.open("w") as stream:
        snap = load_snapshot(str(path), workers=2, progress=Progress(stream, enabled=True, interval=0.0))
    totals = set(re.findall(r"reading objects: [\d,]+/([\d,]+)", log.read_text()))
    assert len(totals) == 1  # one reader's count only
    assert 0 < int(totals.pop().replace(",", "")) < len(snap.pending) + sum(len(i.pods) for i in snap)


def test_plan_reads_a_big_file_in_two_and_prints_the_same_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the command, on a file above :data:`~rescheduler.decode.split.MIN_BYTES`."""
    path = _big_file(tmp_path)
    assert _read(path) is not None
    read_in_two = reader.read_in_two
    halves: list[bool] = []

    def watched(*args: Any, **kwargs: Any) -> SnapshotParts | None:
        parts = read_in_two(*args, **kwargs)
        halves.append(parts is not None)
        return parts

    monkeypatch.setattr(reader, "read_in_two", watched)
    outputs = []
    for workers in ("1", "2"):
        assert main(["plan", "--snapshot", str(path), "--output", "json", "--workers", workers]) == 0
        outputs.append(capsys.readouterr().out)
    assert halves == [True]  # --workers 1 reads in one piece, --workers 2 in two
    assert outputs[0] == outputs[1]
    assert '"drained"' in outputs[0]
