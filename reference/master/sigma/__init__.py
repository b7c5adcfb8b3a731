"""Sigma, the cell's dashboard: its pages, listings, usage history and charts (routes in reference/master/ui.py)."""
