"""Measuring crag: answer quality against plain RAG, and the evaluator's own accuracy.

    crag eval --dataset questions.jsonl --corpus passages.jsonl --drop-gold 0.5
    crag calibrate --dataset questions.jsonl --corpus passages.jsonl

Modules, one job each: `datasets` (reading the files, dropping gold passages),
`metrics` (answer matching and classification measures), `systems` (the workflows
compared), `runner` (running them), `report` (JSON, Markdown, charts), `calibrate`
(fitting the grader's thresholds), `rerank_fit` (a reranker's, cross-validated by question) and `cli` (the two commands).
"""
