"""docs/episode-format.md is generated from the code that reads and writes each format, is
current, and documents every field there is."""

from pathlib import Path

import pydantic
import pytest

from dsh_actors.agent.scoring import SCORERS, check_scorer
from dsh_actors.eval.episodes import Episode
from dsh_actors.eval.reference import _model_table, render_episode_reference

T = 30
DOC = Path(__file__).resolve().parents[2] / "docs" / "episode-format.md"


@pytest.mark.timeout(T)
def test_the_checked_in_episode_format_is_current():
    assert DOC.read_text() == render_episode_reference(), "run `dsh-actors catalog` and commit docs/episode-format.md"


@pytest.mark.timeout(T)
def test_every_field_of_every_episode_model_is_in_the_reference():
    doc = DOC.read_text()
    seen, stack = set(), [Episode]
    while stack:
        model = stack.pop()
        if model in seen:
            continue
        seen.add(model)
        assert f"### {model.__name__}\n" in doc
        for name, field in model.model_fields.items():
            assert f"| `{name}` |" in doc, f"{model.__name__}.{name}"
            for inner in (field.annotation, *getattr(field.annotation, "__args__", ())):
                for candidate in (inner, *getattr(inner, "__args__", ())):
                    if isinstance(candidate, type) and issubclass(candidate, pydantic.BaseModel):
                        stack.append(candidate)
    assert len(seen) == 9  # Episode, Scope, Guard, Shadow, Turn, Call, ModelChoice, Limits, EnvironmentChoice


@pytest.mark.timeout(T)
def test_a_field_added_without_a_docstring_cannot_be_documented_by_accident():
    class Undocumented(pydantic.BaseModel):
        """A model whose second field has no docstring."""

        said: int = 1
        """Documented."""
        unsaid: int = 2

    with pytest.raises(ValueError, match="Undocumented.unsaid has no docstring"):
        _model_table(Undocumented)


@pytest.mark.timeout(T)
@pytest.mark.parametrize("kind", sorted(SCORERS))
def test_each_scorer_as_the_reference_gives_it_is_accepted_and_nothing_more(kind):
    samples = {"expected": "42", "pattern": "4.", "path": "$.answer", "callable": "json:loads"}
    spec = {"kind": kind, **{f: samples[f] for f in SCORERS[kind][1]}}
    check_scorer(spec)  # exactly the documented fields: accepted
    with pytest.raises(Exception, match="has no field"):
        check_scorer({**spec, "extra": 1})
