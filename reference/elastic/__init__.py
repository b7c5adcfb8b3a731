"""Elastic resource management: the job autoscaler, the cell (machine) autoscaler, and reservation estimates."""
