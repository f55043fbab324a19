"""Prompt templates for the LLM-backed components."""

from llama_index.core.prompts import PromptTemplate

GRADE_PROMPT = PromptTemplate(
    "You grade whether a retrieved document helps answer a question.\n"
    "Question: {query}\n\n"
    "Document:\n{document}\n\n"
    "Rate how relevant the document is from 0 (unrelated) to 10 (it contains the answer).\n"
    "Reply with the number only."
)

REWRITE_PROMPT = PromptTemplate(
    "Rewrite the question below into a short web search query of keywords "
    "(entities, key terms; no filler words).\n"
    "Question: {query}\n"
    "Reply with the query only."
)

SYNTHESIZE_PROMPT = PromptTemplate(
    "Answer the question using only the numbered passages. Cite every claim with the "
    "passage number in brackets, like [1]. If the passages do not contain the answer, say so.\n\n"
    "{context}\n\n"
    "Question: {query}\n"
    "Answer:"
)
