"""Workflows built on the llama-index `workflows` engine."""

from crag.workflows.corrective import CorrectiveRAGWorkflow, RunState

__all__ = ["CorrectiveRAGWorkflow", "RunState"]
