"""Locustfile: the control-plane mix under the step load shape (run by loadtests.campaign)."""

from loadtests.shape import StepLoadShape
from loadtests.users import ControlPlaneUser

__all__ = ["ControlPlaneUser", "StepLoadShape"]
