"""Kubernetes API clients from KUBECONFIG, the local cluster's kubeconfig, or the in-cluster service account."""

from __future__ import annotations

import os
from pathlib import Path

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
    return client.ApiClient(cfg)
