"""Hardware stand-ins for clusters without GPUs: simulated GPU nodes (KWOK) and a simulated NVIDIA MIG manager."""
