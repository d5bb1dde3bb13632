"""Small fakes shared by the core tests."""

from dsh_actors import InMemoryRegistry, define_tool, text_block


def echo(name="echo", **extra):
    options = dict(
        name=name, description="echo arguments back", parameters={"text": {"type": "string"}},
        execute=lambda args, ctx: [text_block(args.get("text", ""))],
    )
    return define_tool(**{**options, **extra})


def registry_with(*tools, **options):
    registry = InMemoryRegistry(**options)
    for tool in tools:
        registry.register(tool)
    return registry


def call(call_id="c1", name="echo", arguments=None, **extra):
    return {"call_id": call_id, "name": name, "arguments": {"text": "hi"} if arguments is None else arguments, **extra}
