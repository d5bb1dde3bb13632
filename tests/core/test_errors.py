import pickle


from dsh_actors import DefinitionError, HarnessError, ToolArgsError, ToolTimeoutError, error_result
from dsh_actors.core.errors import (CodeRunFailedError, OutputSchemaError, ProcessControlError, ToolNotFoundError,
                                    error_info, error_message)


def test_every_harness_error_carries_its_class_name_and_a_stable_code():
    cases = [
        (HarnessError("x"), "HarnessError", "HARNESS_ERROR"),
        (ToolArgsError(["a", "b"]), "ToolArgsError", "INVALID_ARGS"),
        (OutputSchemaError(["v"]), "OutputSchemaError", "UNSUPPORTED_SCHEMA"),
        (ToolNotFoundError("ghost"), "ToolNotFoundError", "UNKNOWN_TOOL"),
        (CodeRunFailedError("boom"), "CodeRunFailedError", "CODE_RUN_FAILED"),
        (ToolTimeoutError(250), "ToolTimeoutError", "TOOL_TIMEOUT"),
    ]
    for error, name, code in cases:
        assert (error.name, error.code) == (name, code)
        assert error.info() == {"name": name, "code": code}
        assert error_info(error) == {"name": name, "code": code}


def test_error_messages_follow_the_reference_wording():
    assert str(ToolArgsError(["a", "b"])) == "invalid arguments: a; b"
    assert str(OutputSchemaError(["x", "y"])) == "unsupported output schema: x; y"
    assert str(ToolNotFoundError("ghost")) == 'unknown tool "ghost"'
    assert str(ToolTimeoutError(250)) == "tool call timed out after 250ms"


def test_every_error_pickles_with_its_fields():
    for error in [ToolArgsError(["a"]), ToolNotFoundError("t"), ToolTimeoutError(5), HarnessError("m"),
                  ProcessControlError('tool "x"', "KeyboardInterrupt")]:
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error) and again.__dict__ == error.__dict__
    assert pickle.loads(pickle.dumps(ToolArgsError(["a"]))).violations == ["a"]


def test_misuse_errors_are_also_the_builtin_kind_python_users_catch():
    assert isinstance(DefinitionError("x"), TypeError)


def test_error_result_for_a_harness_error_carries_name_and_code():
    assert error_result(ToolNotFoundError("t")) == {
        "content": [{"type": "text", "text": 'Error: unknown tool "t"'}],
        "is_error": True,
        "error": {"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"},
    }


def test_error_result_for_a_plain_exception_has_no_error_info():
    assert error_result(ValueError("bad")) == {
        "content": [{"type": "text", "text": "Error: bad"}], "is_error": True,
    }


def test_a_thrown_value_whose_str_raises_is_unprintable():
    class Nasty(Exception):
        def __str__(self):
            raise RuntimeError("no")

    class NastyObject:
        def __str__(self):
            raise RuntimeError("no")

    assert error_message(Nasty()) == "<unprintable thrown value>"
    assert error_result(NastyObject())["content"][0]["text"] == "Error: <unprintable thrown value>"


def test_a_non_exception_with_a_string_message_attribute_gives_that_message():
    class Thing:
        message = "from attribute"

    assert error_message(Thing()) == "from attribute"
    assert error_message(42) == "42"


def _every_harness_error():
    """Every HarnessError subclass the package defines (all its modules imported)."""
    import importlib
    import pkgutil

    import dsh_actors

    for module in pkgutil.walk_packages(dsh_actors.__path__, "dsh_actors."):
        # private modules of codemode and envs run as top-level modules of other processes
        if not module.name.endswith("__main__") and not any(f".{layer}._" in module.name
                                                            for layer in ("codemode", "envs")):
            importlib.import_module(module.name)
    found, stack = [], list(HarnessError.__subclasses__())
    while stack:
        cls = stack.pop(0)
        if cls not in found and cls.__module__.startswith("dsh_actors."):
            found.append(cls)
            stack.extend(cls.__subclasses__())
    return found


# The classes whose constructor takes more than a message: the arguments to build one with.
_ARGUMENTS = {"ToolArgsError": (["a", "b"],), "OutputSchemaError": (["v"],), "ToolNotFoundError": ("ghost",),
              "ProcessControlError": ('tool "x"', "SystemExit"), "ToolTimeoutError": (250,),
              "MalformedDecisionError": ("pre-execute", "not a decision"), "ModelError": ("no reply", "max_wall")}


def test_the_drawn_tree_lists_every_error_class_with_its_code_and_every_one_pickles():
    import re

    from dsh_actors.core import errors

    drawn = dict(re.findall(r"[├└]── (\w+Error)\s+([A-Z_]+)", errors.__doc__))
    classes = _every_harness_error()
    assert len(classes) >= 38
    assert {c.__name__: c.code for c in classes} == drawn  # every class drawn, each with its own code
    assert len(set(drawn.values())) == len(drawn)  # codes are unique
    for cls in classes:
        error = cls(*_ARGUMENTS.get(cls.__name__, ("what went wrong",)))
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is cls and str(again) == str(error) and again.__dict__ == error.__dict__, cls
        assert again.info() == {"name": cls.__name__, "code": cls.code}
        assert error_result(again)["error"] == {"name": cls.__name__, "code": cls.code}
