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

SPLIT_PROMPT = PromptTemplate(
    "Does the question below compare or combine two or more named things? If so, write one "
    "short question per thing, each answerable on its own. If not, reply with [].\n"
    "Question: {query}\n"
    'Reply with a JSON list of strings only, e.g. ["When was X founded?", "When was Y founded?"].'
)

FOLLOW_UP_PROMPT = PromptTemplate(
    "A question may need two steps: first find a thing it only describes, then ask about that "
    "thing. Here are facts found for the first step.\n"
    "Question: {query}\n"
    "Facts:\n{facts}\n\n"
    "If the facts name the described thing but do not answer the question, reply with one "
    "short search query about that thing that would. Otherwise reply NONE.\n"
    "Reply with the query or NONE only."
)

BATCH_GRADE_PROMPT = PromptTemplate(
    "You grade whether each retrieved document helps answer a question.\n"
    "Question: {query}\n\n"
    "Documents:\n{documents}\n\n"
    "Rate each of the {count} documents from 0 (unrelated) to 10 (it contains the answer).\n"
    "Reply with a JSON list of {count} numbers only, in the documents' order, e.g. [7, 0, 3]."
)

CONDENSE_PROMPT = PromptTemplate(
    "Rewrite the user's last question so that it can be understood without the conversation: "
    "replace pronouns and fill in what it leaves out from the earlier turns. Keep its meaning; "
    "do not answer it.\n\n"
    "Conversation:\n{conversation}\n\n"
    "Last question: {query}\n"
    "Reply with the standalone question only."
)
