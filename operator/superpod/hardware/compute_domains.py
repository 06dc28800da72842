"""A simulated ComputeDomain controller (NVIDIA's DRA driver's part for GB200 NVL72) for simulated nodes. A stand-in
for the driver, as the simulated MIG manager is: the real one builds from a module the Go proxy does not serve here.

What it plays of the real one: the ComputeDomain kind (resource.nvidia.com/v1beta1) is served; each ComputeDomain
gets the ResourceClaimTemplate its spec.channel names (one IMEX channel, the domain's uid in its config; owned by the
domain); and its status lists the nodes whose channel claims are allocated, each with the node's NVLink clique (the
node's `nvidia.com/gpu.clique` label), as the IMEX daemons that join it report theirs. No IMEX daemon runs."""

from __future__ import annotations

import logging
import threading

from kubernetes import client

from superpod.api.compute_domain import CLIQUE_LABEL
from superpod.hardware.dra_slices import COMPUTE_DOMAIN_DRIVER, compute_domain_claim_template
from superpod.hardware.stepping import keep_stepping

log = logging.getLogger(__name__)
GROUP, VERSION, PLURAL, KIND = "resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain"


def crd() -> dict:
    """The ComputeDomain kind as this stand-in serves it: spec and status as the driver's API has them."""
    channel = {"type": "object", "required": ["resourceClaimTemplate"], "properties": {
        "resourceClaimTemplate": {"type": "object", "required": ["name"],
                                  "properties": {"name": {"type": "string"}}},
        "allocationMode": {"type": "string", "enum": ["All", "Single"], "default": "Single"}}}
    node = {"type": "object", "properties": {name: {"type": kind} for name, kind in (
        ("name", "string"), ("ipAddress", "string"), ("cliqueID", "string"), ("index", "integer"),
        ("status", "string"))}}
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "required": ["channel"], "properties": {
            "numNodes": {"type": "integer", "minimum": 0, "default": 0}, "channel": channel}},
        "status": {"type": "object", "properties": {
            "status": {"type": "string", "enum": ["Ready", "NotReady"]},
            "nodes": {"type": "array", "items": node}}}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{PLURAL}.{GROUP}"},
            "spec": {"group": GROUP, "scope": "Namespaced",
                     "names": {"plural": PLURAL, "singular": "computedomain", "kind": KIND,
                               "listKind": f"{KIND}List"},
                     "versions": [{"name": VERSION, "served": True, "storage": True,
                                   "subresources": {"status": {}}, "schema": {"openAPIV3Schema": schema}}]}}


def domain_nodes(domain: dict, claims: list[dict], cliques: dict[str, str]) -> list[dict]:
    """The status.nodes of `domain`: the nodes of its allocated channel claims (a claim is the domain's when its
    channel config names the domain's uid), in name order."""
    uid, names = domain["metadata"]["uid"], set()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        configs = (allocation.get("devices") or {}).get("config") or ()
        ours = any(((c.get("opaque") or {}).get("parameters") or {}).get("domainID") == uid for c in configs)
        results = (allocation.get("devices") or {}).get("results") or ()
        for result in results:
            if ours and result.get("driver") == COMPUTE_DOMAIN_DRIVER:
                names.add(result.get("pool"))  # the simulated slices' pool is the node
    return [{"name": name, "ipAddress": f"10.0.{index // 250}.{index % 250 + 1}", "cliqueID": cliques.get(name, ""),
             "index": index, "status": "Ready"} for index, name in enumerate(sorted(n for n in names if n))]


class SimComputeDomains:
    def __init__(self, api: client.ApiClient) -> None:
        self.custom, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        self.extensions = client.ApiextensionsV1Api(api)

    def install(self) -> None:
        """Serve the kind (created, or left as it is)."""
        try:
            self.extensions.create_custom_resource_definition(crd())
        except client.ApiException as e:
            if e.status != 409:
                raise

    def step(self) -> None:
        domains = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
        if not domains:
            return
        claims = self.custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims")["items"]
        nodes = self.core.list_node(label_selector=CLIQUE_LABEL, _preload_content=False).json()["items"]
        cliques = {n["metadata"]["name"]: n["metadata"]["labels"][CLIQUE_LABEL] for n in nodes}
        made = {(t["metadata"]["namespace"], t["metadata"]["name"]) for t in self.custom.list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceclaimtemplates")["items"]}
        for domain in domains:
            try:
                self._domain(domain, claims, cliques, made)
            except client.ApiException as e:  # one domain's failure never stops the others
                log.warning("ComputeDomain %s/%s: %s", domain["metadata"]["namespace"], domain["metadata"]["name"],
                            e.reason)

    def _domain(self, domain: dict, claims: list[dict], cliques: dict[str, str], made: set) -> None:
        meta, channel = domain["metadata"], domain["spec"]["channel"]
        namespace = meta["namespace"]
        if (namespace, channel["resourceClaimTemplate"]["name"]) not in made:
            self._make_template(domain)
        joined = domain_nodes(domain, [c for c in claims if c["metadata"]["namespace"] == namespace], cliques)
        status = {"status": "Ready" if joined else "NotReady", "nodes": joined}
        if (domain.get("status") or {}) != status:
            self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, meta["name"],
                                                              {"status": status})

    def _make_template(self, domain: dict) -> None:
        meta, channel = domain["metadata"], domain["spec"]["channel"]
        namespace = meta["namespace"]
        template = compute_domain_claim_template(namespace, channel["resourceClaimTemplate"]["name"], meta["uid"],
                                                 channel.get("allocationMode") or "Single")
        template["metadata"]["ownerReferences"] = [{"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                                                    "name": meta["name"], "uid": meta["uid"], "controller": True}]
        try:
            self.custom.create_namespaced_custom_object("resource.k8s.io", "v1", namespace,
                                                        "resourceclaimtemplates", template)
            log.info("ComputeDomain %s/%s: channel template %s made", namespace, meta["name"],
                     template["metadata"]["name"])
        except client.ApiException as e:
            if e.status != 409:
                raise

    def run(self, stop: threading.Event, interval: float = 0.5) -> None:
        self.install()
        keep_stepping(self.step, stop, "simulated ComputeDomain controller", interval)
