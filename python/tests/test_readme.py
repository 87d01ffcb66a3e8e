"""The README's Python quickstart runs as written."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_quickstart_runs():
    if not README.exists():
        pytest.skip("not run from a checkout")
    text = README.read_text()
    section = text[text.index("## Python\n") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "the Python section has no python code block"
    namespace = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    assert namespace["search"].best_params_ == {"rank": 40}
    assert namespace["K"].shape == (500, 500)
