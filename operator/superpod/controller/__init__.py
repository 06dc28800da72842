"""kopf handlers, thin: parse -> core -> k8s writes."""
