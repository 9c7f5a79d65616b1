"""The rollout's settings: load balancer commands are words with two placeholders, each a whole word filled in
with a validated name or address."""

import pytest
from pydantic import ValidationError

from k3ops.settings.upgrade import UpgradeSpec
from k3ops.upgrade.rollout import rollback_version


def balanced(**commands) -> UpgradeSpec:
    """Both balancer commands, `commands` over them."""
    return UpgradeSpec.model_validate({"upgrade_lb_deregister_command": ["lbctl", "drain", "{host}"],
                                       "upgrade_lb_register_command": ["lbctl", "add", "{host}"], **commands})


def test_placeholders_are_replaced_word_for_word():
    spec = balanced(upgrade_lb_deregister_command=["lbctl", "drain", "{host}", "--ip", "{address}"])
    assert spec.lb_command("deregister", "gpu-01", "fd00::7") == ["lbctl", "drain", "gpu-01", "--ip", "fd00::7"]
    assert spec.lb_command("register", "gpu-01", "10.0.0.7") == ["lbctl", "add", "gpu-01"]
    assert UpgradeSpec().lb_command("register", "gpu-01", "10.0.0.7") is None  # no balancer to put it back behind


@pytest.mark.parametrize("given", ["upgrade_lb_deregister_command", "upgrade_lb_register_command"])
def test_one_balancer_command_without_the_other_is_refused(given):
    """Hosts taken out would never be put back, or hosts never taken out would be registered."""
    with pytest.raises(ValidationError, match=f"{given} is set but upgrade_lb_.*_command is not: set both"):
        UpgradeSpec.model_validate({given: ["lbctl", "{host}"]})


def test_a_status_command_comes_with_the_balancers_two_others_and_takes_the_same_placeholders():
    """Without them the rollout's own drain would read as a person's."""
    with pytest.raises(ValidationError, match="upgrade_lb_status_command is set but the balancer's deregister"):
        UpgradeSpec.model_validate({"upgrade_lb_status_command": ["lbctl", "is-in", "{host}"]})
    with pytest.raises(ValidationError, match="a placeholder must be a word of its own"):
        balanced(upgrade_lb_status_command=["lbctl", "is-in", "--host={host}"])
    spec = balanced(upgrade_lb_status_command=["lbctl", "is-in", "{address}"])
    assert spec.lb_command("status", "gpu-01", "10.0.0.7") == ["lbctl", "is-in", "10.0.0.7"]


@pytest.mark.parametrize("host", ["gpu-01; rm -rf /", "-oProxyCommand=x", "gpu-*", "::1%lo"])
def test_a_value_that_is_no_host_name_or_address_never_reaches_the_command(host):
    spec = balanced()
    with pytest.raises(ValueError):
        spec.lb_command("deregister", host, "10.0.0.7")


@pytest.mark.parametrize("words", [["sh", "-c", "lbctl drain {address}"], ["lbctl", "--backend={host}:8080"],
                                   ["lbctl", "{host}{address}"]])
def test_a_placeholder_inside_a_word_is_refused(words):
    """Inside `sh -c "... {address}"` a value would be shell; inside `--backend={host}` the tool parses it."""
    with pytest.raises(ValidationError, match="a placeholder must be a word of its own"):
        balanced(upgrade_lb_deregister_command=words)


@pytest.mark.parametrize(("words", "message"), [
    (["lbctl", "drain", "{hostname}"], "{hostname} is not a placeholder; use {host} or {address}"),
    (["lbctl", "drain\nrm -rf /", "{host}"], "contains a line break or control character"),
    ([], "give the command as a list of words"), (["", "{host}"], "give the command as a list of words"),
    ("lbctl drain {host}", "valid list"),
])
def test_a_command_that_is_not_words_with_known_placeholders_is_refused(words, message):
    with pytest.raises(ValidationError, match=message):
        balanced(upgrade_lb_register_command=words)


def canary(**changes) -> dict:
    return {"canary": True, "to": "580.126.09", "from": {"gpu-01": "580.105.08", "gpu-02": "580.105.08"}, **changes}


def test_a_failed_canary_goes_back_once_to_the_one_driver_it_ran_when_data_says_so():
    assert rollback_version(canary(), wanted=True) == "580.105.08"
    assert rollback_version(canary(), wanted=False) is None
    assert rollback_version(canary(canary=False), wanted=True) is None  # only canaries
    assert rollback_version(canary(rolled_back_from="580.126.09"), wanted=True) is None  # once
    assert rollback_version(canary(**{"from": {"gpu-01": "580.105.08", "gpu-02": "570.195.03"}}), wanted=True) is None
    assert rollback_version(canary(**{"from": {"gpu-01": "580.126.09"}}), wanted=True) is None  # nothing to go back to
