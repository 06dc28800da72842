"""The `superpod` commands that are not a package of their own: plan, top, usage, demo."""
