"""Which parts of a `%%agent` prompt are filled from the notebook's variables: only
`{name}`, `{name.attr}`, `{name[key]}` in prose; `{{name}}` is the one escape."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tiny_agent_nb.notebook._commands import PromptError, fill_prompt

NAMESPACE: dict[str, Any] = {
    "x": 3,
    "path": "data.csv",
    "cfg": SimpleNamespace(model="m1", paths=["a.txt", "b.txt"]),
    "row": {"name": "Ada", 0: "zero"},
}

CASES = [
    # filled: the three forms, chained, anywhere in prose
    ("{x}", "3"),
    ("Read {path} and sum column {x}.", "Read data.csv and sum column 3."),
    ("{cfg.model}", "m1"),
    ("{cfg.paths[1]}", "b.txt"),
    ("{row[name]} {row[0]}", "Ada zero"),
    # the escape: doubled braces exactly around a field
    ("{{x}}", "{x}"),
    ("{{cfg.paths[0]}}", "{cfg.paths[0]}"),
    # left as written
    ("{unknown}", "{unknown}"),
    ("{unknown.attr}", "{unknown.attr}"),
    ("${x} and $x", "${x} and $x"),
    ("${{x}}", "${{x}}"),
    (
        'json {"a": 1} and {{ braces }} and }} alone {{',
        'json {"a": 1} and {{ braces }} and }} alone {{',
    ),
    ("{ x }", "{ x }"),
    ("{x}} {{x} {{{x}}}", "{x}} {{x} {{{x}}}"),
    ("f(x) = {x**2}", "f(x) = {x**2}"),
    # code spans and fences reach the model verbatim, braces and all
    ("`{x}` but {x}", "`{x}` but 3"),
    ("``a ` {x}`` {x}", "``a ` {x}`` 3"),
    (
        "{x}\n```bash\necho {x} ${x} {{x}} }}\n```\n{x}",
        "3\n```bash\necho {x} ${x} {{x}} }}\n```\n3",
    ),
    ("~~~python\nd = {x: 1}\n~~~\n{x}", "~~~python\nd = {x: 1}\n~~~\n3"),
    ("```\n{x}\n``` not a close\n{x}", "```\n{x}\n``` not a close\n{x}"),
    ("```py\n{x}", "```py\n{x}"),  # an unclosed fence runs to the end
    ("```py\n{x}\n````\n{x}", "```py\n{x}\n````\n3"),  # a longer fence closes it
]


@pytest.mark.parametrize(("prompt", "sent"), CASES)
def test_fill_prompt_fills_only_fields_in_prose(prompt: str, sent: str) -> None:
    assert fill_prompt(prompt, NAMESPACE) == sent


@pytest.mark.parametrize("prompt", ["{cfg.nope}", "{row[missing]}", "{cfg.paths[7]}", "{x[0]}"])
def test_a_field_of_a_known_name_that_does_not_resolve_is_an_error(prompt: str) -> None:
    with pytest.raises(PromptError) as caught:
        fill_prompt(prompt, NAMESPACE)
    field = prompt.strip("{}")
    assert f"{{{field}}} in the prompt" in str(caught.value)
    assert f"{{{{{field}}}}}" in str(caught.value)  # the escape that keeps it as text
