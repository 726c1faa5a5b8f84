"""The policy: defaults, TOML and YAML files, and clear errors for bad settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.errors import ConfigError
from bus.signals import Priority
from coordinator.policy import Policy, agent_key


def test_defaults() -> None:
    policy = Policy()
    assert policy.auto_approve == {Priority.P0, Priority.P1}
    assert policy.human_approval == {Priority.P2}
    assert (policy.agreement_bonus, policy.max_retries, policy.summary_token_limit) == (10, 1, 500)
    assert policy.idempotency_window == 10_000
    assert policy.heartbeat_timeout_seconds < policy.lost_timeout_seconds
    assert policy.weight("anyone") == 1.0


def test_load_toml(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        'max_parallel_agents = 8\nauto_approve = ["P0"]\nhuman_approval = ["P1", "P2"]\n'
        '[expertise]\n"Security Auditor" = 1.5\nqa_engineer = 0.5\n',
        encoding="utf-8",
    )
    policy = Policy.load(path)
    assert policy.max_parallel_agents == 8
    assert policy.auto_approve == {Priority.P0}
    assert policy.expertise == {"security-auditor": 1.5, "qa-engineer": 0.5}
    assert policy.weight("security-auditor") == 1.5
    assert policy.weight("QA Engineer") == 0.5


def test_load_yaml(tmp_path: Path) -> None:
    path = tmp_path / "policy.yml"
    path.write_text("max_retries: 2\nexpertise:\n  security-auditor: 2\n", encoding="utf-8")
    policy = Policy.load(path)
    assert policy.max_retries == 2 and policy.weight("security-auditor") == 2
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    assert Policy.load(empty) == Policy()


@pytest.mark.parametrize(
    ("text", "value"),
    [("010", 10), ("0o10", 8), ("0x10", 16), ("+7", 7), ("5e0", 5.0), ("1.5E+1", 15.0), (".5", 0.5)],
)
def test_yaml_numbers_are_yaml_1_2_s(tmp_path: Path, text: str, value: float) -> None:
    # PyYAML's YAML 1.1 read 010 as eight and 5e0 as text
    path = tmp_path / "policy.yaml"
    path.write_text(f"agreement_bonus: {text}\n", encoding="utf-8")
    assert Policy.load(path).agreement_bonus == value


@pytest.mark.timeout(10)
def test_a_megabyte_number_in_base_60_is_refused_in_linear_time(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("agreement_bonus: " + ":".join(["59"] * 340_000) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="a number is expected, not text"):
        Policy.load(path)


@pytest.mark.parametrize("name", ["policy.toml", "policy.yaml"])
def test_a_byte_order_mark_is_no_setting(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    text = "max_retries = 2\n" if name.endswith(".toml") else "max_retries: 2\n"
    path.write_text(text, encoding="utf-8-sig")  # as some Windows editors save
    assert Policy.load(path).max_retries == 2


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("p.toml", "max_paralel_agents = 3\n", "unknown setting 'max_paralel_agents'"),
        (
            "p.toml",
            "max_parallel_agents = 0\n",
            "max_parallel_agents: Input should be greater than or equal to 1",
        ),
        ("p.toml", "max_retries = 'two'\n", "max_retries: Value error, a number is expected, not text"),
        ("p.toml", 'auto_approve = ["P9"]\n', "auto_approve"),
        ("p.toml", 'human_approval = ["P1"]\n', "P1 is in both auto_approve and human_approval"),
        ("p.toml", "lost_timeout_seconds = 10\n", "lost_timeout_seconds must be longer"),
        ("p.toml", "[expertise]\nqa = -1\n", "expertise.qa: Input should be greater than or equal to 0.001"),
        (
            "p.toml",
            "default_weight = 5e-324\n",
            "default_weight: Input should be greater than or equal to 0.001",
        ),
        ("p.toml", "[expertise]\nqa = 1\nQA = 2\n", "listed twice"),
        ("p.toml", "max_retries = \n", "not valid TOML"),
        ("p.yaml", "- a list\n", "the top level must be a table"),
        ("p.yaml", "a: [unclosed\n", "not valid YAML"),
        (
            "twice.yaml",
            "agreement_bonus: 0\nagreement_bonus: 50\n",
            "line 2: duplicate key 'agreement_bonus'",
        ),
        ("twice.yml", "expertise:\n  qa: 1\n  dev: [2]\n  qa: 3\n", "line 4: duplicate key 'qa'"),
        ("long.yaml", f"{'k' * 1000}: 1\n{'k' * 1000}: 2\n", f"line 2: duplicate key '{'k' * 59}…'"),
        ("esc.yaml", '"a\\nb\\e": 1\n"a\\nb\\e": 2\n', "line 2: duplicate key 'a\\nb\\x1b'"),
        ("long.yaml", f"a: &{'k' * 1000} 1\nb: *{'k' * 1000}\n", f"line 2: aliases (*{'k' * 59}…) are not"),
        ("merge.yaml", "<<: {max_retries: 3}\nmax_retries: 2\n", "line 1: merge keys (<<) are not allowed"),
        ("tag.yaml", "a: 1\n!!merge x: {max_retries: 3}\n", "line 2: merge keys (<<) are not allowed"),
        ("p.yaml", "agreement_bonus: .nan\n", "agreement_bonus: Input should be a finite number"),
        ("p.toml", "[expertise]\nqa = inf\n", "expertise.qa: Input should be a finite number"),
        ("p.json", "{}", "unknown format '.json'"),
        ("deep.yaml", "expertise: " + "[" * 100_000, "exceeded maximum nesting depth"),
        ("deep.yml", "".join(f"{'  ' * n}k{n}:\n" for n in range(40)), "nested too deeply"),
        ("deep.toml", "expertise = " + "[" * 100_000, "nested too deeply"),
        ("big.yaml", "# padding\n" * 200_000, "over 1048576 bytes"),
        (
            "laughs.yaml",
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
                for p, n in zip("abcdefg", "bcdefgh", strict=True)
            )
            + "auto_approve: *h\n",
            "line 2: aliases (*a) are not allowed",
        ),
        ("p.toml", "max_retries = " + "9" * 5_000 + "\n", "not valid TOML: Exceeds the limit (4300 digits)"),
        ("p.yaml", "max_retries: " + "9" * 5_000 + "\n", "not valid YAML: a value cannot be read"),
        ("p.yaml", "max_retries: !!int x\n", "not valid YAML: a value cannot be read"),
        ("p.yaml", "max_retries: !!int ''\n", "not valid YAML: a value cannot be read"),
        ("p.yaml", "max_retries: !!bool x\n", "not valid YAML: a value cannot be read"),
        ("p.yaml", "max_retries: !!timestamp x\n", "not valid YAML: a value cannot be read"),
        (
            "p.yaml",
            "max_retries: 2001-02-30\n",
            "not valid YAML: a value cannot be read (day is out of range",
        ),
        # YAML 1.2's numbers: no base 60 (YAML 1.1's, which PyYAML converts in quadratic time)
        ("p.yaml", "agreement_bonus: 1:30\n", "agreement_bonus: Value error, a number is expected, not text"),
    ],
)
def test_bad_files_are_config_errors(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        Policy.load(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)
    assert len(str(caught.value)) < 400 + len(str(path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [unclosed\n", "(at line 2, column 1)"),
        (
            "a: 1\n---\nb: 2\n",
            "a single document in the stream, but found another document (at line 2, column 1)",
        ),
        ("a: 1\nb: \x00\n", "unacceptable character U+0000: control characters are not allowed (at line 2)"),
    ],
)
def test_a_yaml_error_is_one_line_saying_where(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        Policy.load(path)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value) and "<unicode string>" not in str(caught.value)


def test_an_error_names_ten_problems_and_counts_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "many.toml"
    path.write_text("".join(f"bad_{n} = 1\n" for n in range(20_000)), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        Policy.load(path)
    message = str(caught.value)
    assert message.count("unknown setting") == 10 and message.endswith("and 19990 more problems")


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        Policy.load(tmp_path / "absent.toml")


def test_agent_key_normalises_names() -> None:
    assert agent_key("  Security Auditor ") == agent_key("security_auditor") == "security-auditor"
    assert agent_key("[Security Auditor]") == agent_key("**Security Auditor**") == "security-auditor"
