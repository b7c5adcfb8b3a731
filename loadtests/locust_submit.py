"""Locustfile: submissions only under the step load shape (run by loadtests.campaign)."""

from loadtests.shape import StepLoadShape
from loadtests.users import SubmitOnlyUser

__all__ = ["SubmitOnlyUser", "StepLoadShape"]
