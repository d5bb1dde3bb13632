"""Whose doing an episode's end was: one closed vocabulary, infra exactly when the end says
nothing about the model (no Ray: the rules alone, then a report concluded by them)."""

import pytest

from dsh_actors.eval.episode_run import conclude
from dsh_actors.eval.reports import EpisodeReport
from dsh_actors.eval.termination import INFRA_CODES, REASONS, termination

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("given, reason, infra", [
    (dict(stop=None, errors={}), "scripted", False),
    (dict(stop=None, errors={"INVALID_ARGS": 2, "UNKNOWN_TOOL": 1}), "scripted", False),  # the model's mistakes
    (dict(stop="final", errors={"TOOL_FAILED": 1, "ENV_WALL": 1}), "final", False),
    (dict(stop="max_turns", errors={}), "max_turns", False),
    (dict(stop="final", errors={"WORKER_CRASHED": 1}), "tool_lost", True),
    (dict(stop=None, errors={"ENV_GONE": 1}), "tool_lost", True),
    (dict(stop="model_error", errors={}, failed=True), "endpoint_unavailable", True),
    (dict(stop="malformed_reply", errors={}, failed=True), "malformed_reply", False),
    (dict(stop=None, errors={}, failed=True, failure_code="ENV_START_FAILED"), "environment_failed", True),
    (dict(stop=None, errors={}, failed=True, failure_code="RUNNER_LOST"), "runner_lost", True),
    (dict(stop=None, errors={}, failed=True, failure_code="LOG_WRITE_FAILED"), "harness_error", True),
    (dict(stop="final", errors={}, failed=True), "harness_error", True),  # a model run that ended, then the harness failed
])
def test_each_end_has_one_reason_and_infra_is_exactly_the_infrastructures(given, reason, infra):
    assert termination(**given) == {"reason": reason, "infra": infra}
    assert REASONS[reason].infra is infra


def test_an_episode_whose_call_was_lost_to_infrastructure_does_not_end_ok():
    report = EpisodeReport(id="e", agent="a", ok=3)
    report.errors.update({"WORKER_CRASHED": 1, "INVALID_ARGS": 1})
    conclude(report)
    assert report.status == "failed" and "WORKER_CRASHED" in report.message
    assert report.termination == {"reason": "tool_lost", "infra": True}
    clean = EpisodeReport(id="c", agent="a", ok=3)
    clean.errors.update({"INVALID_ARGS": 1, "ENV_MEMORY": 1})
    conclude(clean)
    assert clean.status == "ok" and clean.termination == {"reason": "scripted", "infra": False}


def test_the_infra_codes_are_codes_the_package_raises():
    from tests.core.test_errors import _every_harness_error

    codes = {cls.code for cls in _every_harness_error()}
    assert INFRA_CODES - codes == set()
