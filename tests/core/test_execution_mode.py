"""execution_mode: parallel only for a visible tool whose classifier returns exactly True."""

from dsh_actors import InMemoryRegistry, define_tool, text_block, tool


def body(args, ctx):
    return [text_block("ok")]


def defined(name, classify=None, **params):
    return define_tool(name=name, description="d", parameters=params or {"path": {"type": "string", "required": True}},
                       execute=body, is_concurrency_safe=classify)


PARALLEL, EXCLUSIVE = {"kind": "parallel"}, {"kind": "exclusive"}


def test_only_a_classifier_returning_exactly_true_makes_a_call_parallel():
    seen = []

    def careful(args):
        seen.append(dict(args))
        return args["path"].startswith("/read")

    registry = InMemoryRegistry()
    registry.register(defined("read", careful))
    registry.register(defined("plain"))
    registry.register(defined("yes", lambda a: "yes"))
    registry.register(defined("raises", lambda a: 1 / 0))
    mode = registry.execution_mode
    assert mode(name="read", arguments={"path": "/read/a"}) == PARALLEL
    assert mode(name="read", arguments={"path": "/write/a"}) == EXCLUSIVE
    assert mode(name="read", arguments={"path": 5}) == EXCLUSIVE  # invalid arguments: never classified
    assert seen == [{"path": "/read/a"}, {"path": "/write/a"}]
    assert mode(name="plain", arguments={"path": "x"}) == EXCLUSIVE  # no classifier
    assert mode(name="yes", arguments={"path": "x"}) == EXCLUSIVE  # truthy, not True
    assert mode(name="raises", arguments={"path": "x"}) == EXCLUSIVE
    assert mode(name="ghost", arguments={}) == EXCLUSIVE
    assert mode({"name": "read", "arguments": {"path": "/read/b"}}) == PARALLEL


def test_a_hidden_tool_is_exclusive_and_a_scope_sees_its_own_view():
    registry = InMemoryRegistry()
    registry.register(defined("read", lambda a: True))
    scope = registry.scope("a1")
    scope.restrict(deny=["read"])
    assert registry.execution_mode(name="read", arguments={"path": "x"}) == PARALLEL
    assert scope.execution_mode(name="read", arguments={"path": "x"}) == EXCLUSIVE
    assert registry.execution_mode(name="read", arguments={"path": "x"}, agent="a1") == EXCLUSIVE


def test_a_raw_tool_s_classifier_gets_the_arguments_exactly_as_given_and_schemas_stay_three_keys():
    given = []
    registry = InMemoryRegistry()
    registry.register({"name": "raw", "description": "r", "parameters": {"type": "object"}, "execute": body,
                       "is_concurrency_safe": lambda a: given.append(a) or True})
    arguments = {"anything": [1, 2]}
    assert registry.execution_mode(name="raw", arguments=arguments) == PARALLEL
    assert given[0] is arguments
    registry.register(defined("read", lambda a: True))
    assert all(set(s) == {"name", "description", "parameters"} for s in registry.schemas())


def test_the_tool_decorator_takes_a_classifier_too():
    @tool(is_concurrency_safe=lambda a: a["n"] < 10)
    def count(n: int) -> str:
        """Count."""
        return str(n)

    registry = InMemoryRegistry()
    registry.register(count)
    assert registry.execution_mode(name="count", arguments={"n": 3}) == PARALLEL
    assert registry.execution_mode(name="count", arguments={"n": 30}) == EXCLUSIVE
    assert registry.execution_mode(name="count", arguments={"n": "3"}) == EXCLUSIVE  # invalid: not called


def test_the_reference_tools_read_in_parallel_and_change_things_alone(tmp_path):
    from dsh_actors.tools import bash_tool, fs_tools

    registry = InMemoryRegistry()
    for definition in [*fs_tools(tmp_path), bash_tool(tmp_path)]:
        registry.register(definition)
    modes = {name: registry.execution_mode(name=name, arguments=arguments)["kind"] for name, arguments in [
        ("read_file", {"path": "a"}), ("write_file", {"path": "a", "content": "x"}),
        ("edit_file", {"path": "a", "old_text": "x", "new_text": "y"}), ("bash", {"command": "ls"})]}
    assert modes == {"read_file": "parallel", "write_file": "exclusive", "edit_file": "exclusive",
                     "bash": "exclusive"}
