"""Locustfile: hello_world calls balanced over BNS endpoints under the step load shape (run by loadtests.campaign)."""

from loadtests.shape import StepLoadShape
from loadtests.users import ServiceUser

__all__ = ["ServiceUser", "StepLoadShape"]
