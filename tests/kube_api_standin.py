"""A Kubernetes API server stand-in for the device-plugin and controller tests:
the handful of REST calls tally makes (tally/cluster/k8s/kube_api.py), over real
HTTP on 127.0.0.1 with the official client on the other end. Objects are the
API's JSON; field selectors are the ones the API documents for pods
(spec.nodeName, spec.schedulerName, status.phase).

No tests live here.
"""
from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse


def _field(obj: dict, path: str):
    for part in path.split("."):
        obj = (obj or {}).get(part)
    return obj if obj is not None else ""


def _merge(dst: dict, patch: dict) -> None:
    """RFC 7386 JSON merge patch."""
    for k, v in patch.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v


class KubeApiStandIn:
    def __init__(self):
        self.pods: dict[tuple[str, str], dict] = {}
        self.nodes: dict[str, dict] = {}
        self.events: list[dict] = []
        self.bindings: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"{}")

            def do_GET(self):
                url = urlparse(self.path)
                query = parse_qs(url.query)
                with standin.lock:
                    if url.path == "/api/v1/pods":
                        items = standin._select(list(standin.pods.values()), query.get("fieldSelector", [""])[0])
                        return self._reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                                 "items": items})
                    if url.path == "/api/v1/nodes":
                        return self._reply(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                                                 "items": list(standin.nodes.values())})
                self._reply(404, {"kind": "Status", "code": 404, "message": f"no {url.path}"})

            def do_PATCH(self):
                parts = unquote(urlparse(self.path).path).strip("/").split("/")
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    return self._reply(415, {"kind": "Status", "code": 415, "message": "merge patches only"})
                patch = self._body()
                with standin.lock:
                    if parts[:3] == ["api", "v1", "nodes"] and parts[3] in standin.nodes:
                        obj = standin.nodes[parts[3]]
                    elif parts[:3] == ["api", "v1", "namespaces"] and (parts[3], parts[5]) in standin.pods:
                        obj = standin.pods[(parts[3], parts[5])]
                    else:
                        return self._reply(404, {"kind": "Status", "code": 404, "message": "not found"})
                    _merge(obj, patch)
                    return self._reply(200, obj)

            def do_POST(self):
                parts = unquote(urlparse(self.path).path).strip("/").split("/")
                body = self._body()
                with standin.lock:
                    if parts[-1] == "events":
                        standin.events.append(body)
                        return self._reply(201, body)
                    if parts[-1] == "binding":
                        ns, name = parts[3], parts[5]
                        pod = standin.pods.get((ns, name))
                        if pod is None or pod["spec"].get("nodeName"):
                            return self._reply(409, {"kind": "Status", "code": 409, "message": "cannot bind"})
                        assert body["target"]["kind"] == "Node", body
                        pod["spec"]["nodeName"] = body["target"]["name"]
                        standin.bindings.append((ns, name, body["target"]["name"]))
                        return self._reply(201, {"kind": "Status", "status": "Success"})
                self._reply(404, {"kind": "Status", "code": 404, "message": "not found"})

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}"
        self._thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self._thread.start()

    @staticmethod
    def _select(items: list[dict], selector: str) -> list[dict]:
        for term in filter(None, selector.split(",")):
            key, _, want = term.partition("=")
            items = [i for i in items if str(_field(i, key)) == want]
        return items

    def add_pod(self, name: str, *, node: str = "", namespace: str = "default", annotations: dict | None = None,
                resources: dict[str, int] | None = None, scheduler: str = "default-scheduler",
                created: str = "2026-11-25T10:00:00Z", phase: str = "Pending") -> dict:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                            "creationTimestamp": created, "annotations": dict(annotations or {})},
               "spec": {"schedulerName": scheduler, "nodeName": node, "containers": [
                   {"name": "main", "image": "example/job", "resources": {
                       "limits": {k: str(v) for k, v in (resources or {}).items()}}}]},
               "status": {"phase": phase}}
        with self.lock:
            self.pods[(namespace, name)] = pod
        return pod

    def add_node(self, name: str, annotations: dict | None = None) -> dict:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": dict(annotations or {})},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        with self.lock:
            self.nodes[name] = node
        return node

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
