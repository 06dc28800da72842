"""Kubernetes API clients from KUBECONFIG, the local cluster's kubeconfig, or the in-cluster service account."""

from __future__ import annotations

import os
from pathlib import Path

import urllib3
from kubernetes import client, config


def load(kubeconfig: str | Path | None = None, pool_size: int = 32) -> client.ApiClient:
    """An ApiClient for `kubeconfig`, else $KUBECONFIG / ~/.kube/config, else the in-cluster service account."""
    cfg = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path or Path("~/.kube/config").expanduser().exists():
        config.load_kube_config(config_file=str(path) if path else None, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    # urllib3 by default sends a PUT or DELETE again on a read error or a 429, out of sight of the caller (and of the
    # operator's Lease guard): only a connection that was never made is tried again here; the rest is the caller's.
    cfg.retries = urllib3.Retry(total=3, connect=3, read=0, status=0, other=0, redirect=0,
                                respect_retry_after_header=False)
    return client.ApiClient(cfg)
