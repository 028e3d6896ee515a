"""Vowpal Wabbit compatibility: its text parser (numba and C), flags, model format, text
outputs, ``terascale vw`` and the VW-only learners behind it."""
