"""No secret in the saved notebook: a notebook run with nbclient in a real kernel, whose
model streams the API key (three characters at a time, in its text and its reasoning)
and then calls a tool in the same answer, and whose prompt is filled from a variable that
holds the key. The `.ipynb` written afterwards, every display update the kernel published
while the cell ran, the session file and the requests the model server received hold
`[redacted]` and no piece of the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiny_agent_nb.demo import run_notebook

from helpers.kernel_helpers import kernel_env
from helpers.openai_server import OpenAIServer, text_reply, tool_call, tool_calls_reply

KEY = "sk-or-v1-SAVED-NOTEBOOK-0123456789abcdef"

# Every display the kernel publishes (an update replaces the one before in the saved
# notebook; this keeps them all), written to published.json by the last cell.
RECORD_DISPLAYS = """\
_published = []
_display_pub = get_ipython().display_pub
_publish = _display_pub.publish
def _recording(data, *args, **kwargs):
    _published.append(data)
    return _publish(data, *args, **kwargs)
_display_pub.publish = _recording
"""
CELLS = [
    RECORD_DISPLAYS,
    "%load_ext tiny_agent_nb",
    'import os\nerr = "AuthError: invalid key " + os.environ["TINY_AGENT_API_KEY"]',
    "%%agent\nWhy does this fail? {err}",
    'import json, pathlib\npathlib.Path("published.json").write_text(json.dumps(_published))',
]


def pieces(secret: str, size: int = 6) -> list[str]:
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def assert_no_piece(text: str, where: str) -> None:
    found = [piece for piece in pieces(KEY) if piece in text]
    assert not found, f"{where} holds {found[:3]}"


@pytest.mark.slow
def test_a_saved_notebook_holds_no_piece_of_a_key_the_model_streamed_or_the_prompt_held(
    server: OpenAIServer, tmp_path: Path
) -> None:
    import nbformat  # noqa: PLC0415

    workdir = tmp_path / "nb"
    workdir.mkdir()
    path = workdir / "analysis.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    server.enqueue(
        tool_calls_reply(
            tool_call("b1", "bash", {"command": "echo checked"}),
            content=f"The key in the error is {KEY}; let me check it.",
            reasoning=f"The user's key is {KEY}.",
        ),
        text_reply(f"The key {KEY} was revoked. Make a new one."),
    )
    env = kernel_env(tmp_path, base_url=server.base_url, notebook=path)
    env["TINY_AGENT_API_KEY"] = KEY
    run = run_notebook(notebook, cwd=workdir, env=env, timeout=60)
    nbformat.write(run.notebook, path)

    saved = path.read_text(encoding="utf-8")
    assert "[redacted]" in saved  # the answer was shown, redacted
    assert_no_piece(saved, "the saved notebook")
    agent_cell = run.notebook.cells[3]
    shown = "".join(
        o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in agent_cell.outputs
    )
    assert "The key in the error is [redacted]; let me check it." in shown
    assert "The key [redacted] was revoked. Make a new one." in shown
    assert "Note: the prompt holds a configured secret" in shown

    published = json.loads((workdir / "published.json").read_text(encoding="utf-8"))
    answers = [d["text/plain"] for d in published if "text/markdown" in d]
    assert len(answers) >= 4  # the first paragraph was drawn as it streamed, then closed
    for data in published:
        assert_no_piece(json.dumps(data), "a published display")

    session = (workdir / "analysis.agent.jsonl").read_text(encoding="utf-8")
    assert "Why does this fail? AuthError: invalid key [redacted]" in session
    assert_no_piece(session, "the session file")
    for request in server.requests:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert_no_piece(request.raw.decode(), "a request's body")
