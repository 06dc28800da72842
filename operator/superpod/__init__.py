"""superpod-scheduler: gang, topology-aware and MIG-aware scheduling of GPU training jobs."""

__version__ = "0.1.0"
