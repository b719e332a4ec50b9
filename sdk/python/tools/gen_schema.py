"""Generates zeish/schema.py from api/openapi.yaml: one TypedDict per object
schema, a Literal per enum, and the error codes with their HTTP statuses.

    python3 tools/gen_schema.py           # rewrite zeish/schema.py
    python3 tools/gen_schema.py --check   # exit 1 if it is not current

TypedDicts keep the API's objects exactly as they travel (snake_case keys,
optional fields absent rather than None), so a field the server adds later
reaches the caller instead of being dropped by a model class.
"""

from __future__ import annotations

import argparse
import keyword
import textwrap
import re
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SDK = HERE.parent
SPEC = SDK.parent.parent / "api" / "openapi.yaml"
OUT = SDK / "zeish" / "schema.py"

SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}


def camel(s: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[_\W]+", s) if p)


def summary(text: str) -> str:
    """The first paragraph of a description, on one line."""
    para = re.split(r"\n\s*\n", text.strip(), maxsplit=1)[0]
    return " ".join(para.split())


def comment(text: str, indent: str) -> list[str]:
    """text as `#:` comment lines of at most 100 characters."""
    return textwrap.wrap(text, 100, initial_indent=indent + "#: ", subsequent_indent=indent + "#: ")


class Generator:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.schemas: dict[str, Any] = spec["components"]["schemas"]
        self.aliases: list[str] = []
        self.classes: list[tuple[str, list[str], str]] = []  # name, bases, body
        self.emitted: set[str] = set()

    def ref_name(self, ref: str) -> str:
        return ref.rsplit("/", 1)[-1]

    def type_of(self, s: dict[str, Any], hint: str) -> str:
        """The annotation for schema s; inline objects become classes named hint."""
        if "$ref" in s:
            t = self.ref_name(s["$ref"])
        elif "allOf" in s:
            refs = [x for x in s["allOf"] if "$ref" in x]
            if len(s["allOf"]) == 1 and refs:
                t = self.ref_name(refs[0]["$ref"])
            else:
                t = self.object_class(hint, s)
        elif "enum" in s:
            t = "Literal[" + ", ".join(repr(v) for v in s["enum"]) + "]"
        elif s.get("type") == "array":
            t = "list[" + self.type_of(s.get("items", {}), hint + "Item") + "]"
        elif s.get("type") == "object" or "properties" in s:
            if "properties" in s:
                t = self.object_class(hint, s)
            else:
                extra = s.get("additionalProperties")
                val = self.type_of(extra, hint + "Value") if isinstance(extra, dict) and extra else "Any"
                t = f"dict[str, {val}]"
        elif s.get("type") in SCALARS:
            t = SCALARS[s["type"]]
        else:
            t = "Any"
        if s.get("nullable"):
            t += " | None"
        return t

    def object_class(self, name: str, s: dict[str, Any]) -> str:
        if name in self.emitted:
            return name
        self.emitted.add(name)
        bases: list[str] = []
        props: dict[str, Any] = {}
        required: set[str] = set()
        parts = s.get("allOf", [s])
        for p in parts:
            if "$ref" in p:
                bases.append(self.ref_name(p["$ref"]))
                continue
            props.update(p.get("properties", {}))
            required.update(p.get("required", []))
        fields: list[tuple[str, str, str]] = []
        for key, ps in props.items():
            inner = name + camel(key)
            t = self.type_of(ps, inner + "Body" if inner == name + name else inner)
            if key not in required:
                t = f"NotRequired[{t}]"
            fields.append((key, t, summary(ps.get("description", ""))))
        doc = summary(s.get("description", "")) or f"The API's `{name}` object."
        functional = any(keyword.iskeyword(k) or not k.isidentifier() for k, _, _ in fields)
        lines: list[str] = []
        if functional:
            # A key that is a Python keyword (`from`) needs the functional form.
            base = bases[0] if bases else None
            lines.append(f"{name} = TypedDict(")
            lines.append(f"    {name!r},")
            lines.append("    {")
            for key, t, _ in fields:
                lines.append(f"        {key!r}: {t},")
            lines.append("    },")
            lines.append(")")
            if base:
                raise SystemExit(f"{name}: keyword keys and a base schema together are not supported")
            lines.append(f'"""{escape_doc(doc)}"""')
            # Emitted last: the functional form evaluates its types at once.
            self.classes.append((name, ["*"], "\n".join(lines)))
            return name
        head = f"class {name}({', '.join(bases) or 'TypedDict'}):"
        lines.append(head)
        lines.append(f'    """{escape_doc(doc)}"""')
        for key, t, desc in fields:
            if desc:
                lines.append("")
                lines.extend(comment(desc, "    "))
            lines.append(f"    {key}: {t}")
        self.classes.append((name, bases, "\n".join(lines)))
        return name

    def run(self) -> str:
        for name, s in self.schemas.items():
            if s.get("type") == "object" or "properties" in s or ("allOf" in s and len(s["allOf"]) > 1):
                if "properties" in s or "allOf" in s:
                    self.object_class(name, s)
                    continue
            t = self.type_of(s, name)
            doc = summary(s.get("description", ""))
            alias = "\n".join(comment(doc, "") + [f"{name}: TypeAlias = {t}"])
            self.aliases.append(alias)
        codes = self.schemas["ErrorCode"]["enum"]
        status = dict(re.findall(r"^\| `(\w+)` \| (\d{3}) \|", self.schemas["ErrorCode"]["description"], re.M))
        missing = [c for c in codes if c not in status]
        if missing:
            raise SystemExit(f"ErrorCode's table gives no status for {missing}")
        out = [HEADER]
        out.extend(a + "\n" for a in self.aliases)
        for _, _, body in self.ordered():
            out.append("\n" + body + "\n")
        out.append("\n#: Every error code of the API, in the order the contract lists them.")
        out.append("ERROR_CODES: tuple[ErrorCode, ...] = (")
        out.extend(f"    {c!r}," for c in codes)
        out.append(")")
        out.append("\n#: The HTTP status each error code comes with (the ErrorCode table).")
        out.append("ERROR_STATUS: dict[str, int] = {")
        out.extend(f"    {c!r}: {status[c]}," for c in codes)
        out.append("}")
        return "\n".join(out) + "\n"

    def ordered(self) -> list[tuple[str, list[str], str]]:
        """Classes with every base before the classes built on it."""
        done: set[str] = set()
        result: list[tuple[str, list[str], str]] = []
        pending = list(self.classes)
        while pending:
            for i, (name, bases, body) in enumerate(pending):
                ready = all(b in done for b in bases) if bases != ["*"] else len(pending) == sum(
                    1 for _, b, _ in pending if b == ["*"])
                if ready:
                    result.append((name, bases, body))
                    done.add(name)
                    del pending[i]
                    break
            else:
                raise SystemExit("schema inheritance has a cycle")
        return result


def escape_doc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


HEADER = '''"""The API's objects, as api/openapi.yaml defines them.

Generated by tools/gen_schema.py from api/openapi.yaml: do not edit by hand;
run ``python3 tools/gen_schema.py`` after changing the contract
(tests/test_generated.py fails while this file is stale).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

__all__ = ["ERROR_CODES", "ERROR_STATUS"]  # the types are imported by name
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="exit 1 if zeish/schema.py is stale")
    args = ap.parse_args()
    text = Generator(yaml.safe_load(SPEC.read_text())).run()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python3 {Path(__file__).relative_to(SDK)}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
