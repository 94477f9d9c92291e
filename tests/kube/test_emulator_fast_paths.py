"""The emulator's cheap paths keep its semantics: stored objects are shared rather than copied
(a write replaces them, never changes them), every change is encoded once for all watches and
queued events go out several to a chunk, request headers are read without the email package,
quantities are cached. And the scheduler's client reloads its credentials at most once a
second."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import pytest
import urllib3

from tests.kube.emulator import ApiServer, canonical_quantity, parse_quantity
from toposched.kube import api as kube_api

JSON = dict[str, Any]


def pod(name: str, image: str = "pytorch:2") -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "x"}},
        "spec": {
            "containers": [
                {"name": "main", "image": image, "resources": {"limits": {"nvidia.com/gpu": 2}}}
            ]
        },
    }


def read_watch(url: str, start: int) -> list[JSON]:
    """Every event of a pods watch from `start` until the server ends it."""
    http = urllib3.PoolManager()
    query = {"watch": "1", "resourceVersion": str(start), "timeoutSeconds": "30"}
    r = http.request("GET", f"{url}/api/v1/pods", fields=query, preload_content=False)
    events: list[JSON] = []
    buffer = b""
    for chunk in r.stream(1 << 16):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        events.extend(json.loads(line) for line in lines if line.strip())
    r.release_conn()
    return events


def test_a_burst_of_writes_reaches_a_watch_whole_and_in_order() -> None:
    """Writes faster than the stream drains: each change arrives once, in order, as it was
    written, however many events a chunk carries."""
    with ApiServer() as api:
        start = api.resource_version
        written: list[JSON] = []
        events: list[JSON] = []
        reader = threading.Thread(target=lambda: events.extend(read_watch(api.url, start)))
        reader.start()
        api.wait_until(lambda: api.watch_count("pods") == 1)
        with api.lock:  # held: the events queue up behind it, to be sent as a burst
            for i in range(200):
                written.append(api.create(pod(f"p{i}")))
            for i in range(0, 200, 2):
                written.append(api.set_phase("default", f"p{i}", "Running"))
            for i in range(0, 200, 4):
                written.append(api.delete("pods", f"p{i}") or {})
        api.drop_watches()
        reader.join(10)
        assert not reader.is_alive()
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(set(versions)) and len(events) == len(written)
    assert [e["type"] for e in events] == ["ADDED"] * 200 + ["MODIFIED"] * 100 + ["DELETED"] * 50
    for event, obj in zip(events, written, strict=True):
        assert event["object"] == obj


def test_the_handle_takes_and_returns_copies_and_history_keeps_old_states() -> None:
    """Neither what is given to the handle nor what it returns is the stored object; a status
    write shares the spec with the version before it, and a later spec change leaves both
    versions as they were (a watch replaying the history sees each as it was)."""
    with ApiServer() as api:
        start = api.resource_version
        given = pod("a")
        made = api.create(given)
        given["spec"]["containers"][0]["image"] = "changed:1"
        made["spec"]["containers"][0]["image"] = "changed:2"
        made["metadata"]["labels"]["app"] = "changed"
        stored = api.get("pods", "a")
        assert stored is not None
        assert stored["spec"]["containers"][0]["image"] == "pytorch:2"
        assert stored["metadata"]["labels"] == {"app": "x"}
        running = api.set_phase("default", "a", "Running")
        running["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "9"
        again = api.get("pods", "a")
        assert again is not None
        assert again["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
        assert again["spec"] == stored["spec"] and again["status"]["phase"] == "Running"
        again["spec"]["containers"][0]["image"] = "pytorch:3"  # images may change
        updated = api.update(again)
        assert updated["spec"]["containers"][0]["image"] == "pytorch:3"
        patched = api.patch("pods", "a", {"metadata": {"labels": {"app": "y"}}})
        patched["metadata"]["labels"]["app"] = "z"
        assert (api.get("pods", "a") or {})["metadata"]["labels"] == {"app": "y"}
        replay = replayed(api, start)
    images = [e["object"]["spec"]["containers"][0]["image"] for e in replay]
    phases = [e["object"]["status"]["phase"] for e in replay]
    assert images == ["pytorch:2", "pytorch:2", "pytorch:3", "pytorch:3"]
    assert phases == ["Pending", "Running", "Running", "Running"]
    assert [e["object"]["metadata"]["labels"]["app"] for e in replay] == ["x", "x", "x", "y"]


def replayed(api: ApiServer, start: int) -> list[JSON]:
    """The pods events after `start`, from a watch opened now (replayed from the history)."""
    events: list[JSON] = []
    reader = threading.Thread(target=lambda: events.extend(read_watch(api.url, start)))
    reader.start()
    api.wait_until(lambda: api.watch_count("pods") == 1)
    api.drop_watches()
    reader.join(10)
    return events


def raw_request(api: ApiServer, request: bytes) -> bytes:
    """Send `request` as it is on a new connection; everything the server answers until it
    closes the connection."""
    host, port = api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(request)
        out = b""
        while chunk := conn.recv(65536):
            out += chunk
    return out


def test_request_headers_are_read_as_the_email_parser_read_them() -> None:
    """Any case of a header's name, the first of repeated ones, folded lines; HTTP/1.0 and
    `Connection: close` end the connection after the answer; `Expect: 100-continue`; HEAD
    (which the API answers 405) gets the headers alone."""
    body = json.dumps(pod("h")).encode()
    with ApiServer() as api:
        answer = raw_request(
            api,
            b"POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\n"
            b"content-TYPE: application/json\r\nContent-Type: text/plain\r\n"
            b"X-Folded: one\r\n two\r\nConnection: close\r\n"
            b"CONTENT-LENGTH: " + str(len(body)).encode() + b"\r\n\r\n" + body,
        )
        assert answer.startswith(b"HTTP/1.1 201 ")
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["metadata"]["name"] == "h"
        old = raw_request(api, b"GET /api/v1/namespaces/default/pods/h HTTP/1.0\r\n\r\n")
        assert old.startswith(b"HTTP/1.1 200 ")
        assert json.loads(old.split(b"\r\n\r\n", 1)[1])["metadata"]["name"] == "h"
        # anything else is read as the base class reads it (which answers HTTP/2 without a
        # status line, as to HTTP/0.9)
        wrong = raw_request(api, b"GET /api/v1/pods HTTP/2.0\r\n\r\n")
        assert b"Error code: 505" in wrong
        body = json.dumps(pod("e")).encode()
        expect = raw_request(
            api,
            b"POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nExpect: 100-continue\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body,
        )
        assert expect.startswith(b"HTTP/1.1 100 ") and b"HTTP/1.1 201 " in expect
        head = raw_request(
            api, b"HEAD /api/v1/namespaces/default/pods/h HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        assert head.startswith(b"HTTP/1.1 405 ") and head.endswith(b"\r\n\r\n")  # no body


def test_cached_quantities_answer_as_before() -> None:
    assert canonical_quantity(4) == canonical_quantity("4") == "4"
    assert canonical_quantity(0.5) == canonical_quantity("0.5") == "500m"
    assert canonical_quantity("1024Mi") == "1Gi" and canonical_quantity("1e3") == "1e3"
    assert parse_quantity("2k") == 2000
    for bad in (True, [1], {"a": 1}, None, "1.2.3", "4x"):
        with pytest.raises(ValueError):
            canonical_quantity(bad)
        with pytest.raises(ValueError):
            parse_quantity(bad)


class Configuration:
    """The refresh hook's part of kubernetes.client.Configuration, and a loader's hook that
    installs itself again each time it runs, as the kubeconfig loader's does."""

    def __init__(self) -> None:
        self.calls = 0
        self.refresh_api_key_hook: Any = self.loader_hook

    def loader_hook(self, conf: Any) -> None:
        self.calls += 1
        conf.refresh_api_key_hook = self.loader_hook


def test_credentials_are_reloaded_at_most_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(kube_api.time, "monotonic", lambda: now[0])
    conf = Configuration()
    kube_api._throttle_refresh(conf)
    wrapped = conf.refresh_api_key_hook
    for _ in range(50):
        conf.refresh_api_key_hook(conf)
    assert conf.calls == 1 and conf.refresh_api_key_hook is wrapped
    now[0] += kube_api.REFRESH_EVERY_S
    conf.refresh_api_key_hook(conf)
    conf.refresh_api_key_hook(conf)
    assert conf.calls == 2 and conf.refresh_api_key_hook is wrapped
    none = Configuration()
    none.refresh_api_key_hook = None
    kube_api._throttle_refresh(none)  # no hook (a token that never expires): nothing to wrap
    assert none.refresh_api_key_hook is None
