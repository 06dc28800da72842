"""The simulated ComputeDomain controller's status: the nodes of the domain's allocated channels, with cliques."""

from __future__ import annotations

from superpod.hardware.compute_domains import crd, domain_nodes


def channel_claim(node: str, domain_uid: str, driver: str = "compute-domain.nvidia.com") -> dict:
    config = [{"source": "FromClaim", "opaque": {"driver": driver, "parameters": {"domainID": domain_uid}}}]
    return {"metadata": {"namespace": "team-a"}, "status": {"allocation": {"devices": {
        "results": [{"request": "channel", "driver": driver, "pool": node, "device": "channel-0"}],
        "config": config}}}}


def test_a_domain_lists_the_nodes_of_its_own_allocated_channels_with_their_cliques():
    domain = {"metadata": {"uid": "cd-1"}}
    claims = [channel_claim("tray-2", "cd-1"), channel_claim("tray-1", "cd-1"), channel_claim("tray-9", "cd-2"),
              {"metadata": {"namespace": "team-a"}}]  # another domain's, and one not allocated
    nodes = domain_nodes(domain, claims, {"tray-1": "c.1", "tray-2": "c.1", "tray-9": "c.2"})
    assert [(n["name"], n["cliqueID"], n["index"], n["status"]) for n in nodes] == [
        ("tray-1", "c.1", 0, "Ready"), ("tray-2", "c.1", 1, "Ready")]
    assert len({n["ipAddress"] for n in nodes}) == 2


def test_the_kind_is_served_with_a_status_subresource():
    version = crd()["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert crd()["metadata"]["name"] == "computedomains.resource.nvidia.com"
