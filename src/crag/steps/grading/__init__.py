"""Relevance graders and the verdict policy of the CRAG paper.

- `verdict`: Correct, Incorrect or Ambiguous from the grades (`decide_verdict`), read with
  each grader's own thresholds (`thresholds_of`);
- `lexical`: the offline evaluator (`LexicalEvaluator`), no model;
- `llm`: a chat model grades each chunk (`LLMGrader`);
- `batch`: one call grades all chunks (`BatchLLMGrader`);
- `rerank`: a cross-encoder reranker grades all chunks in one request (`RerankGrader`);
- `cascade`: the model grades only where the offline evaluator is unsure (`CascadeGrader`);
- `cache`: grades kept and read back (`CachedGrader`).
"""

from crag.steps.grading.batch import BatchLLMGrader, parse_batch_grades
from crag.steps.grading.cache import CachedGrader, prompt_version
from crag.steps.grading.cascade import CascadeGrader
from crag.steps.grading.lexical import LexicalEvaluator, context_of
from crag.steps.grading.llm import LLMGrader, parse_grade
from crag.steps.grading.rerank import RERANK_THRESHOLDS, RerankGrader
from crag.steps.grading.verdict import RATING_THRESHOLDS, decide_verdict, explain_verdict, thresholds_of

__all__ = [
    "BatchLLMGrader",
    "CachedGrader",
    "CascadeGrader",
    "LLMGrader",
    "LexicalEvaluator",
    "RATING_THRESHOLDS",
    "RERANK_THRESHOLDS",
    "RerankGrader",
    "context_of",
    "decide_verdict",
    "explain_verdict",
    "parse_batch_grades",
    "parse_grade",
    "prompt_version",
    "thresholds_of",
]
