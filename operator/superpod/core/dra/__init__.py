"""Dynamic Resource Allocation (resource.k8s.io/v1), pure: DRA objects read from dicts (model), CEL device selectors
(selectors), and allocation of claims on one node as kube-scheduler's structured allocator does (allocate)."""
