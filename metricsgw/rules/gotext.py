"""Go's text behaviour that relabelling copies bit for bit: ``regexp.Expand``'s replacement templates
(``$1``, ``${1}``, ``$name``, ``${name}``, ``$$``), ``strings.ToLower``/``ToUpper``'s one-rune case mapping, and
``%q`` quoting in Prometheus's messages. Apart from relabel.py because none of it is about relabelling: each
function answers what Go answers, and tests/rules/test_relabel.py checks the templates against Go's cases.
"""

from __future__ import annotations

from typing import Any


# --- Go's regexp.Expand, compiled once per template -----------------------------------------

def _is_name_char(ch: str) -> bool:
    # Go's extract(): unicode.IsLetter || unicode.IsDigit || '_'
    return ch == "_" or ch.isalpha() or ch.isdecimal()


def compile_template(template: str, group_index: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """Split a template into (literal, group) parts; group -1 = none (the reference expands to "")."""
    parts: list[tuple[str, int]] = []
    lit: list[str] = []
    i, n = 0, len(template)
    while i < n:
        j = template.find("$", i)
        if j < 0:
            lit.append(template[i:])
            break
        lit.append(template[i:j])
        i = j + 1
        if i < n and template[i] == "$":  # $$ is a literal $
            lit.append("$")
            i += 1
            continue
        brace = i < n and template[i] == "{"
        k = i + 1 if brace else i
        start = k
        while k < n and _is_name_char(template[k]):
            k += 1
        name = template[start:k]
        if not name or (brace and (k >= n or template[k] != "}")):
            lit.append("$")  # malformed: Go keeps the $ as raw text and goes on after it
            continue
        i = k + 1 if brace else k
        if name.isascii() and name.isdigit() and not (name[0] == "0" and len(name) > 1) and len(name) <= 9:
            group = int(name)
        else:
            group = group_index.get(name, -1)
        parts.append(("".join(lit), group))
        lit = []
    parts.append(("".join(lit), -1))
    return tuple(parts)


def expand(parts: tuple[tuple[str, int], ...], match: Any, ngroups: int) -> str:
    out: list[str] = []
    for lit, group in parts:
        out.append(lit)
        if 0 <= group <= ngroups:
            s = match.group(group)
            if s is not None:
                out.append(s)
    return "".join(out)


# --- Go's strings.ToLower / ToUpper: simple (one rune to one rune) case mapping --------------

def go_lower(s: str) -> str:
    if s.isascii():
        return s.lower()
    # per character, so there is no final-sigma context rule; U+0130's simple mapping is "i"
    return "".join("i" if c == "\u0130" else (c.lower() if len(c.lower()) == 1 else c) for c in s)


def go_upper(s: str) -> str:
    if s.isascii():
        return s.upper()
    return "".join(c.upper() if len(c.upper()) == 1 else c for c in s)


# --- Go's %q ----------------------------------------------------------------------------------

def go_quote(s: str) -> str:
    """Go's %q for the ASCII strings these messages quote."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
