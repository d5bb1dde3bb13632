"""The SDK stub is always valid Python, whatever the tools' names and descriptions say."""

import ast

from hypothesis import example, given, settings, strategies as st

from dsh_actors.codemode.sdk import render_sdk

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=40)  # surrogates and controls too
NAMES = st.one_of(st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True), ANY_TEXT.filter(bool))


def stub(name, description, properties=None):
    parameters = {"type": "object", "properties": properties or {}}
    return render_sdk([{"name": name, "description": description, "parameters": parameters}])


def docstring_of(source, name):
    tree = ast.parse(source)
    method = next(n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == name)
    return ast.get_docstring(method, clean=False)


@settings(max_examples=300, deadline=None)
@given(name=NAMES, description=ANY_TEXT, prop=NAMES, prop_description=ANY_TEXT)
@example(name="_", description="", prop="\ud800", prop_description="")  # a lone surrogate as a property name
def test_any_name_and_description_give_a_stub_that_parses(name, description, prop, prop_description):
    ast.parse(stub(name, description, {prop: {"type": "string", "description": prop_description}}))


def test_descriptions_that_used_to_end_the_docstring_read_back_as_written():
    cases = ['Run "it"', "ends with a backslash \\", 'quotes """ inside', 'two at the end ""',
             "escape-looking \\N{bad} \\x", '"starts with a quote']
    for text in cases:
        assert docstring_of(stub("tool", text), "tool") == text


def test_real_world_descriptions_parse():
    real = [
        'Execute a bash command. Use "&&" to chain commands; quote paths with spaces: "my dir".',
        "Search files with a regex, e.g. \\d+\\.py$ or \\bTODO\\b.",
        'Write JSON such as {"key": "value"} to a file.',
        "Windows paths look like C:\\Users\\name\\",
        "Fetch a URL.\r\nReturns markdown.\u2028Next line.\x00",
    ]
    for text in real:
        ast.parse(stub("tool", text))
