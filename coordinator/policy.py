"""The coordinator's policy: every threshold the rules apply, with a default for each.

A policy file is TOML (``.toml``) or YAML (``.yaml``/``.yml``) holding the fields of :class:`Policy` at its
top level; expertise weights are a table keyed by agent name::

    max_parallel_agents = 8
    auto_approve = ["P0"]
    human_approval = ["P1", "P2"]

    [expertise]
    security-auditor = 1.5

Unknown keys and bad values are a :class:`~bus.errors.ConfigError` naming the key, never a silent default.
"""

from __future__ import annotations

import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bus.display import cut, quoted
from bus.errors import ConfigError
from bus.signals import Priority

__all__ = ["MAX_POLICY_BYTES", "MAX_TIMEOUT_SECONDS", "Policy", "agent_key"]

MAX_POLICY_BYTES: Final = 1 << 20
"""A policy file is read only up to this size: it holds a few settings and a table of weights."""

_SEPARATORS = re.compile(r"[\s_]+")
_AROUND: Final = " \t[]<>()*`'\""

Weight = Annotated[float, Field(ge=0.001, le=1000)]
"""An agent's expertise weight. Bounded below as well: a weight near the smallest float rounds every
confidence it multiplies to a few values (95.5 became 96)."""

MAX_TIMEOUT_SECONDS: Final = 10 * 366 * 86_400
"""Ten years: a longer timeout means none, and a much longer one does not fit a ``timedelta`` (every tick
of the rules would fail on it)."""


def agent_key(name: str) -> str:
    """The normalised form of an agent name used for expertise weights and agreement.

    ``Security Auditor`` (from a ``## Security Auditor Result`` heading), ``security_auditor`` and
    ``security-auditor`` are the same agent, and so is ``[Security Auditor]`` (the seeds' heading
    template, ``## [Agent Name] Result``, filled in with its brackets kept) or ``**Security Auditor**``.
    """
    return _SEPARATORS.sub("-", name.strip(_AROUND).lower())


class Policy(BaseModel):
    """Thresholds of the coordination rules. Every field has a default; files override some of them."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_parallel_agents: int = Field(default=5, ge=1, le=10_000)
    """Agents of one group that may be active (not completed, failed or lost) at the same time."""
    max_agents_per_group: int = Field(default=50, ge=1, le=1_000_000)
    """The group's budget: agents ever registered in it, retries and delegates included (not scripts that
    only send findings); a delegation beyond it is denied, a failure beyond it escalated, not retried."""
    max_delegation_depth: int = Field(default=2, ge=0, le=100)
    """Top-level agents have depth 0; a delegate has its requester's depth plus one."""
    auto_approve: frozenset[Priority] = frozenset({Priority.P0, Priority.P1})
    """Delegation priorities approved without a human once the checklist passes."""
    human_approval: frozenset[Priority] = frozenset({Priority.P2})
    """Delegation priorities held for a human ``approve``/``deny`` once the checklist passes."""
    min_task_description_chars: int = Field(default=40, ge=0)
    """A delegated task description shorter than this is not "well defined"."""
    min_delegation_reason_chars: int = Field(default=15, ge=0)
    """A delegation reason shorter than this does not justify a new agent."""
    expertise: dict[str, Weight] = Field(default_factory=dict)
    """Agent name -> weight of its confidence when findings are merged."""
    default_weight: Weight = 1.0
    """Weight of an agent not listed in :attr:`expertise`."""
    agreement_bonus: float = Field(default=10.0, ge=0, le=100)
    """Added once to a merged finding's confidence when distinct agents report it (capped at 100)."""
    max_retries: int = Field(default=1, ge=0, le=100)
    """Retries (with reduced scope) of a failed agent before a human is asked."""
    heartbeat_timeout_seconds: float = Field(default=120.0, gt=0, le=MAX_TIMEOUT_SECONDS)
    """A running agent silent for longer than this is ``timed_out``."""
    lost_timeout_seconds: float = Field(default=900.0, gt=0, le=MAX_TIMEOUT_SECONDS)
    """A running or timed-out agent silent for longer than this is ``lost`` (and handled as failed)."""
    summary_token_limit: int = Field(default=500, ge=1)
    """A result summary estimated above this many tokens violates the contract."""
    idempotency_window: int = Field(default=10_000, ge=1, le=10_000_000)
    """How many recently applied envelope ids of a group are remembered to drop duplicates."""
    retire_after_seconds: float = Field(default=0.0, ge=0, le=MAX_TIMEOUT_SECONDS)
    """A group with no active agent and nothing waiting for a human, to which nothing was applied for this
    long, is retired: its state is deleted (see :mod:`coordinator.rules.retirement`). 0 (the default):
    never."""

    @field_validator("*", mode="before")
    @classmethod
    def _as_written(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads true as 1 and "3" as 3: `max_parallel_agents = true` would silently allow one
        # agent, and a quoted number is as likely a mistake in another setting as this one.
        values = value.values() if isinstance(value, dict) else [value]
        if any(isinstance(v, bool) for v in values):
            raise ValueError("true/false is not a valid value here")
        if info.field_name in _NUMBERS and any(isinstance(v, str) for v in values):
            raise ValueError("a number is expected, not text (without quotes)")
        return value

    @field_validator("expertise")
    @classmethod
    def _normalise_names(cls, value: dict[str, float]) -> dict[str, float]:
        normalised: dict[str, float] = {}
        for name, weight in value.items():
            key = agent_key(name)
            if not key:
                raise ValueError("an agent name in expertise is empty")
            if key in normalised:
                raise ValueError(f"agent {name!r} is listed twice (as {key!r})")
            normalised[key] = weight
        return normalised

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        both = self.auto_approve & self.human_approval
        if both:
            names = ", ".join(sorted(p.value for p in both))
            raise ValueError(f"priority {names} is in both auto_approve and human_approval")
        if self.lost_timeout_seconds <= self.heartbeat_timeout_seconds:
            raise ValueError("lost_timeout_seconds must be longer than heartbeat_timeout_seconds")
        return self

    def weight(self, agent: str) -> float:
        """The expertise weight of an agent name (normalised), or :attr:`default_weight`."""
        return self.expertise.get(agent_key(agent), self.default_weight)

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Read a policy from a TOML or YAML file; any problem is a :class:`ConfigError`."""
        file = Path(path)
        raw = _read_mapping(file)
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(f"policy file {file}: {_describe(exc)}") from None
        except RecursionError:
            raise ConfigError(f"policy file {file}: nested too deeply") from None


_NUMBERS: Final = frozenset(
    name
    for name, info in Policy.model_fields.items()
    if info.annotation in (int, float) or name == "expertise"  # the weights
)


def _read_mapping(file: Path) -> dict[str, Any]:
    suffix = file.suffix.lower()
    if suffix not in {".toml", ".yaml", ".yml"}:
        raise ConfigError(
            f"policy file {file}: unknown format {suffix or '(none)'!r}; use .toml, .yaml or .yml"
        )
    try:
        if not stat.S_ISREG(file.stat().st_mode):  # a pipe would wait for a writer, a device never end
            raise ConfigError(f"policy file {file}: not a regular file")
        with file.open("rb") as handle:
            data = handle.read(MAX_POLICY_BYTES + 1)
        # A byte order mark (some Windows editors write one) is no setting: TOML would refuse it.
        text = data.decode("utf-8").removeprefix("\ufeff")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"policy file {file}: cannot read it: {exc}") from None
    if len(data) > MAX_POLICY_BYTES:
        raise ConfigError(f"policy file {file}: over {MAX_POLICY_BYTES} bytes; a policy is a few settings")
    raw = _parsed(file, suffix, text)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"policy file {file}: the top level must be a table of settings")
    return raw


def _parsed(file: Path, suffix: str, text: str) -> Any:
    """The file's text as TOML or YAML; any problem is a :class:`ConfigError`."""
    try:
        return tomllib.loads(text) if suffix == ".toml" else _yaml(file, text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"policy file {file}: not valid TOML: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"policy file {file}: not valid YAML: {_yaml_problem(exc, text)}") from None
    except RecursionError:
        raise ConfigError(f"policy file {file}: nested too deeply") from None
    except ValueError as exc:  # tomllib's: an integer of more digits than Python converts
        raise ConfigError(f"policy file {file}: not valid TOML: {' '.join(str(exc).split())}") from None


_INT: Final = "tag:yaml.org,2002:int"
_FLOAT: Final = "tag:yaml.org,2002:float"
_INT_12: Final = re.compile(r"[-+]?(?:[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z")
_FLOAT_12: Final = re.compile(
    r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z|[-+]?\.(?:inf|Inf|INF)\Z|\.(?:nan|NaN|NAN)\Z"
)


def _int_12(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    sign, digits = (-1, text[1:]) if text[0] == "-" else (1, text.lstrip("+"))
    base = {"0o": 8, "0x": 16}.get(digits[:2], 10)
    return sign * int(digits[2:] if base != 10 else digits, base)


def _numbers_12(base: type[yaml.SafeLoader] | type[yaml.CSafeLoader]) -> type[yaml.SafeLoader]:
    """``base`` reading numbers as YAML 1.2 does (its core schema), not as PyYAML's YAML 1.1: ``010`` is
    ten, not eight; ``1:30`` is text, not ninety (and a long one, not a quadratic time to convert);
    ``5e0`` is a number, not text."""

    class Loader(base):  # type: ignore[valid-type,misc]
        # the resolvers of every other tag, as PyYAML's own class keeps them (a class attribute)
        yaml_implicit_resolvers = {  # noqa: RUF012
            first: [(tag, pattern) for tag, pattern in found if tag not in (_INT, _FLOAT)]
            for first, found in base.yaml_implicit_resolvers.items()
        }

    Loader.add_implicit_resolver(_INT, _INT_12, list("-+0123456789"))
    Loader.add_implicit_resolver(_FLOAT, _FLOAT_12, list("-+.0123456789"))
    Loader.add_constructor(_INT, _int_12)
    return Loader


_LOADER: Final = _numbers_12(yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)


def _yaml(file: Path, text: str) -> Any:
    # An alias repeats what it names without copying it: a few lines of them ("billion laughs") make a
    # list of 10^8 items that validation would walk for minutes. A policy is a few settings and needs none.
    # A key given twice is a mistake that PyYAML would settle silently (the last one wins), and so is one
    # given again beside a merge key.
    loader = _LOADER
    open_: list[_Mapping | None] = []  # the collections open at this event (None: a sequence)
    for event in yaml.parse(text, Loader=loader):
        line = event.start_mark.line + 1 if event.start_mark else "?"
        if isinstance(event, yaml.AliasEvent):
            raise ConfigError(
                f"policy file {file}: line {line}: aliases (*{cut(str(event.anchor), 60)}) are not allowed"
            )
        if isinstance(event, yaml.NodeEvent) and open_ and (mapping := open_[-1]) is not None:
            if mapping.key_next and isinstance(event, yaml.ScalarEvent):
                if (event.value == "<<" and not event.style) or event.tag == _MERGE:  # PyYAML merges it
                    raise ConfigError(f"policy file {file}: line {line}: merge keys (<<) are not allowed")
                if event.value in mapping.keys:
                    raise ConfigError(f"policy file {file}: line {line}: duplicate key {quoted(event.value)}")
                mapping.keys.add(event.value)
            mapping.key_next = not mapping.key_next
        if isinstance(event, yaml.CollectionStartEvent):
            open_.append(_Mapping() if isinstance(event, yaml.MappingStartEvent) else None)
        elif isinstance(event, yaml.CollectionEndEvent):
            open_.pop()
        if len(open_) > _MAX_DEPTH:
            raise ConfigError(f"policy file {file}: nested too deeply")
    return _constructed(file, text, loader)


def _constructed(file: Path, text: str, loader: type[yaml.SafeLoader]) -> Any:
    """The YAML's value, built by PyYAML (the events were checked); any problem is a :class:`ConfigError`."""
    try:
        return yaml.load(text, Loader=loader)
    except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError) as exc:
        # PyYAML's constructors fail with Python's own errors on a value that is not what its tag or its
        # form says: `!!int x`, `!!timestamp x`, the date 2001-02-30, an integer of more digits than Python
        # converts, a sexagesimal float beyond a float's range.
        problem = " ".join(str(exc).split())
        raise ConfigError(f"policy file {file}: not valid YAML: a value cannot be read ({problem})") from None


def _yaml_problem(exc: yaml.YAMLError, text: str) -> str:
    """PyYAML's error on one line, as TOML's are: its own text spans lines and names no file but
    ``<unicode string>``."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        what = ", ".join(part for part in (exc.context, exc.problem) if part) or "invalid YAML"
        return f"{what} (at line {mark.line + 1}, column {mark.column + 1})" if mark else what
    if isinstance(exc, yaml.reader.ReaderError):  # a control character; carries a position, not a mark
        character = exc.character if isinstance(exc.character, str) else chr(exc.character)
        line = text.count("\n", 0, exc.position) + 1
        return f"unacceptable character U+{ord(character):04X}: {exc.reason} (at line {line})"
    return " ".join(str(exc).split())


@dataclass
class _Mapping:
    """A YAML mapping being read: its keys so far, and whether the next node is a key."""

    keys: set[str] = field(default_factory=set)
    key_next: bool = True


_MERGE: Final = "tag:yaml.org,2002:merge"
_MAX_DEPTH: Final = 32
_MAX_ERRORS: Final = 10
"""Problems listed in one error message; a file with thousands of bad keys gets a line, not megabytes."""


def _describe(exc: ValidationError) -> str:
    parts = []
    errors = exc.errors()
    for err in errors[:_MAX_ERRORS]:
        where = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown setting {where[:80]!r}")
        else:
            parts.append(f"{where[:80] or 'policy'}: {err['msg']}")
    if len(errors) > _MAX_ERRORS:
        parts.append(f"and {len(errors) - _MAX_ERRORS} more problems")
    return "; ".join(parts)
