"""Measurement of the scheduler: synthetic cells, the openb trace, the FGD packing experiment, and their reports."""
