"""Implementations of the workflow's steps, one module per step kind."""
