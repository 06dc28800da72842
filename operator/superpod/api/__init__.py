"""Pydantic models of the CRDs (the single source of crds/*.yaml)."""
