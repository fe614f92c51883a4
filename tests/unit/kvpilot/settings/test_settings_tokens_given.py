"""How a list of tokens may be given: comma-separated or as a JSON list in the environment (as every other list is),
and never as a token no request can carry. Split at its commas, ``["r1…","r2…"]`` was the tokens ``["r1…"`` and
``"r2…"]``: authentication on, every client refused 401 without a word at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvpilot.settings import SettingsError, load_settings

R1, R2 = "r1-aaaaaaaaaaaaaaaa", "r2-bbbbbbbbbbbbbbbb"


@pytest.mark.parametrize(
    ("variable", "value", "field"),
    [
        ("KVPILOT_READ_TOKENS", f'["{R1}", "{R2}"]', "read_tokens"),  # the flat alias, JSON
        ("KVPILOT_API__READ_TOKENS", f' ["{R1}","{R2}"] ', "read_tokens"),  # the nested name, JSON with spaces
        ("KVPILOT_API__ADMIN_TOKENS", f'["{R1}","{R2}"]', "admin_tokens"),  # admin tokens alike
        ("KVPILOT_READ_TOKENS", f"{R1},{R2}", "read_tokens"),  # comma-separated, as ever
    ],
)  # fmt: skip
def test_a_json_list_in_the_environment_is_its_tokens(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str
) -> None:
    monkeypatch.setenv(variable, value)
    tokens = getattr(load_settings().api, field)
    assert [t.get_secret_value() for t in tokens] == [R1, R2]


def test_keda_tokens_take_a_json_list_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPILOT_KEDA__BEARER_TOKENS", f'["{R1}", "{R2}"]')
    assert [t.get_secret_value() for t in load_settings().keda.bearer_tokens] == [R1, R2]


@pytest.mark.parametrize(
    ("env", "yaml_text", "said"),
    [
        ({"KVPILOT_READ_TOKENS": "[1, 2]"}, "", "not a JSON list of strings"),  # brackets, but no list of strings
        ({"KVPILOT_ADMIN_TOKENS": '[""]'}, "", "token 0 is empty"),  # a JSON list holding an empty token
        ({}, 'api: {read_tokens: ["", "' + R1 + '"]}\n', "token 0 is empty"),  # YAML alike
        ({}, 'api: {admin_tokens: ["' + R1 + '", " ' + R2 + '"]}\n', "token 1 begins or ends with white space"),
    ],
)  # fmt: skip
def test_a_token_no_request_can_carry_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], yaml_text: str, said: str
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    path = tmp_path / "k.yaml"
    path.write_text(yaml_text)
    with pytest.raises(SettingsError) as e:
        load_settings(path)
    assert said in str(e.value)
    assert R1 not in str(e.value)  # the refusal shows no token
    assert R2 not in str(e.value)
