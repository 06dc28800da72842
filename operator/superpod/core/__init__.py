"""Pure scheduling: snapshot model, placement, queue order, MIG planning. No I/O, no clock, no kopf/kubernetes."""
