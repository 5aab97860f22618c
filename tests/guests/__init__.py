"""Bare-metal test guests of p4pmu (see build.py, layout.py, script.py)."""
