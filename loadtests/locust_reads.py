"""Locustfile: the control plane's reads only under the step load shape (run by loadtests.campaign)."""

from loadtests.shape import StepLoadShape
from loadtests.users import ReadOnlyUser

__all__ = ["ReadOnlyUser", "StepLoadShape"]
