"""Reflection: distill finished runs into lessons, and review what recalled lessons were worth.

::

    from hindsight_core import Memory
    from hindsight_core.reflection import Reflector, Step, Trajectory, llm_from_settings

    memory = Memory(("acme", "agent"))
    reflector = Reflector(memory, llm=llm_from_settings(memory.settings))  # None: rule-based
    result = reflector.reflect(Trajectory(goal="...", steps=[Step(kind="tool_call", ...)],
                                          outcome="success"))
    reflector.review(Trajectory(goal="...", recalled=[...], used=[...]))

Pieces: :class:`Trajectory`/:class:`Step` (what a run was), :class:`Boundary` (when
it is over), :class:`TaskLog` (working memory for agents without a framework),
:class:`Reflector`/:class:`AsyncReflector` (distill and review),
:class:`BackgroundReflector` (off the agent's thread), :class:`LLM` providers
(:class:`OpenAICompatibleLLM`, :class:`ScriptedLLM`) and
:class:`RuleBasedDistiller` (no model needed).
"""

from ..llms.openai import OpenAICompatibleLLM
from .background import BackgroundReflector
from .distiller import PROMPT_VERSION, render_trajectory
from .llm import LLM, LLMResponse, ScriptedLLM, llm_from_settings
from .parse import ParseError, extract_json, parse_records
from .reflector import AsyncReflector, ReflectionResult, Reflector
from .review import ReviewDecision, ReviewResult
from .rules import RuleBasedDistiller
from .tasks import AsyncTaskLog, TaskLog
from .trajectory import Boundary, Outcome, Step, StepKind, Trajectory, idle_rounds

__all__ = [
    "LLM",
    "PROMPT_VERSION",
    "AsyncReflector",
    "AsyncTaskLog",
    "BackgroundReflector",
    "Boundary",
    "LLMResponse",
    "OpenAICompatibleLLM",
    "Outcome",
    "ParseError",
    "ReflectionResult",
    "Reflector",
    "ReviewDecision",
    "ReviewResult",
    "RuleBasedDistiller",
    "ScriptedLLM",
    "Step",
    "StepKind",
    "TaskLog",
    "Trajectory",
    "extract_json",
    "idle_rounds",
    "llm_from_settings",
    "parse_records",
    "render_trajectory",
]
