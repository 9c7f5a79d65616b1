"""The serialisations of the Go libraries NVIDIA's container tools are built with.

nvidia-ctk rewrites whole config files with encoding/json and pelletier/go-toml v1, writes CDI specs
with sigs.k8s.io/yaml and logs through logrus; files and logs only match the real tool's byte for
byte if they are written the way those libraries write them. Only the value types the tools meet
are supported: str, bool, int, float, list and dict.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

TOML_INDENT = "  "
TOML_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
TOML_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}
# encoding/json escapes these for safe embedding in HTML.
GO_JSON_HTML_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
# A YAML plain scalar that would read back as something other than this string needs quotes.
YAML_NEEDS_QUOTES = re.compile(
    r"^$|^[-+]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?$|^0[xob]|^(true|false|yes|no|on|off|y|n|null|~)$"
    r"|^[-?:](\s|$)|^[\s,\[\]{}#&*!|>'\"%@`]|: | #|\s$",
    re.IGNORECASE,
)
LOGRUS_LEVELS = {"info": ("INFO", 36), "warning": ("WARN", 33), "error": ("ERRO", 31)}
LOGRUS_MESSAGE_WIDTH = 44
LOGRUS_BARE = re.compile(r"^[A-Za-z0-9\-._/@^+]+$")


def go_json(document: dict) -> str:
    """json.MarshalIndent(v, "", "    ") of a map: sorted keys, no trailing newline."""
    text = json.dumps(document, indent=4, sort_keys=True, ensure_ascii=False)
    for character, escape in GO_JSON_HTML_ESCAPES.items():
        text = text.replace(character, escape)
    return text


def go_toml(document: dict) -> str:
    """go-toml v1 Tree.Marshal(): plain keys first then tables, each alphabetically, tables indented."""
    return "".join(_toml_table(document, "", ""))


def _toml_table(table: dict, indent: str, prefix: str) -> list[str]:
    simple = sorted(key for key, value in table.items() if not _toml_is_table(value))
    nested = sorted(key for key, value in table.items() if _toml_is_table(value))
    lines = [f"{indent}{_toml_key(key)} = {_toml_value(table[key])}\n" for key in simple]
    for key in nested:
        name = f"{prefix}.{_toml_key(key)}" if prefix else _toml_key(key)
        value = table[key]
        for subtable in value if isinstance(value, list) else [value]:
            brackets = ("[[", "]]") if isinstance(value, list) else ("[", "]")
            lines.append(f"\n{indent}{brackets[0]}{name}{brackets[1]}\n")
            lines += _toml_table(subtable, indent + TOML_INDENT, name)
    return lines


def _toml_is_table(value) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and bool(value)
                                       and all(isinstance(item, dict) for item in value))


def _toml_key(key: str) -> str:
    return key if TOML_BARE_KEY.match(key) else f'"{_toml_string(key)}"'


def _toml_string(text: str) -> str:
    return "".join(TOML_ESCAPES.get(character, f"\\u{ord(character):04X}" if ord(character) < 0x1F else character)
                   for character in text)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.1f}" if value.is_integer() else repr(value)
    if isinstance(value, str):
        return f'"{_toml_string(value)}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"go-toml value of type {type(value).__name__} is not simulated")


def k8s_yaml(document) -> str:
    """sigs.k8s.io/yaml (go-yaml v2): sorted keys, 2-space maps, list items at their key's indentation."""
    return "".join(_yaml_node(document, ""))


def _yaml_node(node, indent: str) -> list[str]:
    lines = []
    if isinstance(node, dict):
        for key in sorted(node):
            value = node[key]
            if _yaml_is_collection(value):
                lines.append(f"{indent}{key}:\n")
                lines += _yaml_node(value, indent if isinstance(value, list) else indent + "  ")
            else:
                lines.append(f"{indent}{key}: {_yaml_scalar(value)}\n")
    else:
        for item in node:
            if _yaml_is_collection(item):
                nested = _yaml_node(item, indent + "  ")
                lines.append(f"{indent}- {nested[0][len(indent) + 2:]}")
                lines += nested[1:]
            else:
                lines.append(f"{indent}- {_yaml_scalar(item)}\n")
    return lines


def _yaml_is_collection(value) -> bool:
    return isinstance(value, (dict, list)) and bool(value)


def _yaml_scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return json.dumps(value) if YAML_NEEDS_QUOTES.search(value) else value


def logrus(level: str, message: str, terminal: bool, moment: datetime) -> str:
    """logrus' TextFormatter: colored "INFO[0000] msg" on a terminal, key=value lines otherwise."""
    name, color = LOGRUS_LEVELS[level]
    if terminal:
        return f"\x1b[{color}m{name}\x1b[0m[0000] {message:<{LOGRUS_MESSAGE_WIDTH}} "
    stamp = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    text = message if LOGRUS_BARE.match(message) else json.dumps(message)
    return f'time="{stamp}" level={level} msg={text}'
