"""The few Kubernetes API calls tally makes, through the official client.

Objects come back as plain dicts (the API's JSON), so the rest of tally reads
`pod["metadata"]["annotations"]` exactly as the API documents it and needs no
model classes.

Who calls what (the RBAC in deploy/rbac.yaml grants exactly this):
- device plugin: list pods on its node (to find the pod an Allocate is for and
  read its annotations), patch its Node's `tally.dev/gpus` annotation (the GPUs'
  state, for placement), create Events on pods whose annotations it refuses;
- placement controller: list pending pods and nodes, bind pods, patch pods'
  annotations, create Events.
"""
from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timezone

log = logging.getLogger(__name__)


def _client():
    try:
        import kubernetes.client as k8s
    except ImportError as e:
        raise SystemExit(f"talking to Kubernetes needs the `kubernetes` package ({e}); "
                         f"install tally's cluster extra: pip install 'tally[cluster]'") from None
    return k8s


class KubeApi:
    def __init__(self, api_client):
        k8s = _client()
        self._k8s = k8s
        self.core = k8s.CoreV1Api(api_client)

    @classmethod
    def in_cluster(cls) -> "KubeApi":
        """From the pod's service account (KUBERNETES_SERVICE_HOST, its token and CA)."""
        k8s = _client()
        from kubernetes import config
        config.load_incluster_config()
        return cls(k8s.ApiClient())

    @classmethod
    def at(cls, url: str, token: str | None = None) -> "KubeApi":
        """An API server at `url` (e.g. `kubectl proxy`'s http://127.0.0.1:8001)."""
        k8s = _client()
        cfg = k8s.Configuration(host=url)
        if token:
            cfg.api_key = {"authorization": token}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        return cls(k8s.ApiClient(cfg))

    # reads -------------------------------------------------------------------------
    def pods_on_node(self, node: str) -> list[dict]:
        r = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}", _preload_content=False)
        return json.loads(r.data).get("items") or []

    def pending_pods(self, scheduler_name: str) -> list[dict]:
        """Pods waiting for `scheduler_name` that no one has bound yet."""
        selector = f"spec.schedulerName={scheduler_name},spec.nodeName=,status.phase=Pending"
        r = self.core.list_pod_for_all_namespaces(field_selector=selector, _preload_content=False)
        return json.loads(r.data).get("items") or []

    def nodes(self) -> list[dict]:
        return json.loads(self.core.list_node(_preload_content=False).data).get("items") or []

    # writes ------------------------------------------------------------------------
    def annotate_node(self, node: str, annotations: dict[str, str]) -> None:
        self.core.patch_node(node, {"metadata": {"annotations": annotations}},
                             _content_type="application/merge-patch+json", _preload_content=False)

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": annotations}},
                                       _content_type="application/merge-patch+json", _preload_content=False)

    def bind(self, namespace: str, name: str, node: str) -> None:
        k8s = self._k8s
        body = k8s.V1Binding(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
                             target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=node))
        self.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)

    def event(self, pod: dict, reason: str, message: str, kind: str = "Warning",
              component: str = "tally") -> None:
        """An Event on `pod` (what `kubectl describe pod` shows). Failures are logged, never raised:
        an event is a courtesy, the error it reports has been handled already."""
        k8s = self._k8s
        meta = pod.get("metadata", {})
        namespace = meta.get("namespace", "default")
        now = datetime.now(timezone.utc)
        body = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(generate_name=f"{meta.get('name', 'pod')}.", namespace=namespace),
            involved_object=k8s.V1ObjectReference(api_version="v1", kind="Pod", name=meta.get("name"),
                                                  namespace=namespace, uid=meta.get("uid")),
            reason=reason, message=message[:1024], type=kind, count=1,
            first_timestamp=now, last_timestamp=now, source=k8s.V1EventSource(component=component))
        try:
            self.core.create_namespaced_event(namespace, body, _preload_content=False)
        except Exception as e:  # noqa: BLE001 - any API failure: log it and carry on
            log.warning("could not record event %s on pod %s/%s: %s", reason, namespace, meta.get("name"), e)


def created_at(obj: dict) -> float:
    """The object's creationTimestamp as a unix time (0 when absent), for oldest-first order."""
    text = obj.get("metadata", {}).get("creationTimestamp")
    if not text:
        return 0.0
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return time.time()
