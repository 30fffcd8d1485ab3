"""A plugin's ``config { ... }`` block: its schema and decoded values.

The host decodes the HCL block against the schema a plugin reports and
hands the plugin the values as JSON: strings, numbers, bools, lists and maps
of strings; durations as Go duration strings ("20ms"), sizes as whole
numbers of bytes. Declare the block either as a :class:`Schema` (the plugin
then receives a dict) or as a dataclass (the plugin receives an instance,
durations as float seconds)::

    @dataclass
    class Config:
        max_poll: float = attribute(0.02, type="duration", doc="Longest wait between looks.")
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from ._proto.goray.plugin.v1 import plugin_pb2

#: Attribute types a schema may use.
TYPES = ("string", "number", "bool", "list(string)", "map(string)", "duration", "size")


class ConfigError(ValueError):
    """The config block is invalid; the host reports the message at the
    plugin's block."""


@dataclass
class Attribute:
    """One ``name = value`` argument of the config block."""

    type: str
    required: bool = False
    description: str = ""
    sensitive: bool = False
    #: The default (a Go duration string for durations); None: none.
    default: Any = None


@dataclass
class Schema:
    """The attributes of a config block (nested blocks are not supported by
    the Python SDK yet)."""

    attributes: Dict[str, Attribute] = field(default_factory=dict)

    def validate(self) -> None:
        for name, a in self.attributes.items():
            if a.type not in TYPES:
                raise ConfigError(f"attribute {name!r}: unknown type {a.type!r} (want one of {', '.join(TYPES)})")
            if a.required and a.default is not None:
                raise ConfigError(f"attribute {name!r}: required and has a default")

    def to_proto(self) -> plugin_pb2.Schema:
        out = plugin_pb2.Schema()
        for name, a in self.attributes.items():
            pa = out.attributes[name]
            pa.type = a.type
            pa.required = a.required
            pa.optional = not a.required
            pa.sensitive = a.sensitive
            pa.description = a.description
            if a.default is not None:
                pa.default_json = json.dumps(a.default).encode()
        return out

    def normalize(self, cfg: Dict[str, Any]) -> Dict[str, Any]:
        """Checks the decoded block and fills in defaults. Raises
        ConfigError naming the attribute."""
        out: Dict[str, Any] = {}
        for name, v in cfg.items():
            a = self.attributes.get(name)
            if a is None:
                raise ConfigError(f"unknown attribute {name!r}")
            if v is not None:
                out[name] = _check_value(name, a.type, v)
        for name, a in self.attributes.items():
            if name in out:
                continue
            if a.required:
                raise ConfigError(f"missing required attribute {name!r}")
            if a.default is not None:
                out[name] = _check_value(name, a.type, a.default)
        return out


def _check_value(name: str, typ: str, v: Any) -> Any:
    ok = {
        "string": isinstance(v, str),
        "number": isinstance(v, (int, float)) and not isinstance(v, bool),
        "bool": isinstance(v, bool),
        "list(string)": isinstance(v, list) and all(isinstance(x, str) for x in v),
        "map(string)": isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
        "duration": isinstance(v, str),
        "size": isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    }[typ]
    if not ok:
        raise ConfigError(f"attribute {name!r}: want a {typ}, got {v!r}")
    if typ == "duration":
        try:
            parse_duration(v)
        except ValueError as e:
            raise ConfigError(f"attribute {name!r}: {e}") from None
    return v


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(s: str) -> float:
    """Parses a Go duration string ("1h2m3.5s", "20ms", "0") into seconds."""
    text = s
    sign = 1.0
    if text[:1] in "+-" and text:
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f"invalid duration {s!r}")
    total, pos = 0.0, 0
    while pos < len(text):
        m = _PART.match(text, pos)
        if m is None:
            raise ValueError(f"invalid duration {s!r} (want a Go duration such as \"20ms\" or \"1m30s\")")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Formats seconds as a Go duration string the host understands."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    for unit, scale in (("h", 3_600_000_000_000), ("m", 60_000_000_000), ("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1000)):
        if ns % scale == 0:
            return f"{ns // scale}{unit}"
    return f"{ns}ns"


def attribute(default: Any = dataclasses.MISSING, *, type: Optional[str] = None, doc: str = "", sensitive: bool = False) -> Any:
    """A dataclass field that is a config attribute. type overrides the type
    derived from the annotation ("duration": a float of seconds in Python,
    "size": an int of bytes). A field without a default is required."""
    meta = {"goray_type": type, "goray_doc": doc, "goray_sensitive": sensitive}
    if default is dataclasses.MISSING:
        return field(metadata=meta)
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type_copy(default), metadata=meta)
    return field(default=default, metadata=meta)


def type_copy(v: Any) -> Any:
    return json.loads(json.dumps(v))


_ANNOTATIONS = {"str": "string", "bool": "bool", "int": "number", "float": "number",
                "List[str]": "list(string)", "list[str]": "list(string)",
                "Dict[str, str]": "map(string)", "dict[str, str]": "map(string)"}


def schema_of(cls: type) -> Schema:
    """The Schema of a config dataclass."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    s = Schema()
    for f in dataclasses.fields(cls):
        typ = f.metadata.get("goray_type")
        if typ is None:
            ann = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            typ = _ANNOTATIONS.get(ann)
            if typ is None:
                raise TypeError(f"config field {f.name!r}: cannot derive an attribute type from {ann!r}; pass type=")
        default: Any = None
        required = False
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            required = True
        if typ == "duration" and default is not None:
            default = format_duration(float(default))
        s.attributes[f.name] = Attribute(type=typ, required=required, description=f.metadata.get("goray_doc", ""),
                                         sensitive=f.metadata.get("goray_sensitive", False), default=default)
    s.validate()
    return s


def decode(cls: type, schema: Schema, cfg: Dict[str, Any]) -> Any:
    """An instance of the config dataclass from the normalized values
    (durations become float seconds)."""
    values = {}
    for name, v in cfg.items():
        if schema.attributes[name].type == "duration":
            v = parse_duration(v)
        values[name] = v
    return cls(**values)
