"""Example task programs run by Minborg jobs."""
