"""`superpod simulate`: replay a trace through the operator's own controller on a virtual clock, beside baselines."""
