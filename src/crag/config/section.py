"""What every settings section shares: unknown keys are refused, and so are bad assignments."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A table of `crag.toml` (`[grader]`, `[llm]`, ...): its keys are checked when it is built
    and when one is assigned."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
