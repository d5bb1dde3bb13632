"""The ``dsh-actors`` command line (also ``python -m dsh_actors``).

* ``demo`` — tools, policies and calls on a local Ray instance of its own.
* ``eval [EPISODES…]`` — the batch evaluation (default: the shipped example episodes).
* ``replay LOGS --policies P`` — what a policy set would have denied or allowed differently.
* ``export RUN [--format jsonl|parquet] [--rl | --messages]`` — a run's episodes as rows
  (:mod:`.eval.export`).
* ``show LOG`` — a session log's calls as cards.
* ``catalog`` — write docs/tool-catalog.md from the shipped tools' schemas and
  docs/episode-format.md from the episode, report, log and export formats' code.
* ``approvals list|allow ID|reject ID|policy ask|never|always`` — answer a registry's pending
  asks from any driver; joins the cluster at ``--address`` (or ``RAY_ADDRESS``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from .core.errors import HarnessError

__all__ = ["main"]


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _stop_on_signals() -> None:
    """SIGINT and SIGTERM end the command at once, even while Ray is still connecting (its
    retries run in C and would not hear a KeyboardInterrupt until they give up)."""
    import signal

    def stop(signum: int, _frame: object) -> None:
        print(f"dsh-actors approvals: stopped ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)


def _token_available() -> bool:
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or Path(
        os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token")).is_file()


def _join(address: str, timeout_s: float) -> str | None:
    """Join the cluster at ``address`` within ``timeout_s``; the reason when it could not."""
    import threading

    host = address.split("://")[-1].rsplit(":", 1)[0]
    if "RAY_AUTH_MODE" not in os.environ and _token_available():
        # Ray turns token auth on for every cluster it starts (a driver's own local one too)
        # and keeps the token in ~/.ray/auth_token, but a client only sends it when told to
        # (Ray reads this when it is imported: set it first).
        os.environ["RAY_AUTH_MODE"] = "token"
    if host in ("127.0.0.1", "localhost", "::1"):
        # A loopback address (a driver's own local Ray prints one): keep Ray on loopback, or
        # it rewrites the address to this machine's interface and never finds the cluster.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False
    from .runtime.local import ensure_ray

    outcome: list[BaseException | None] = []

    def connect() -> None:
        try:
            ensure_ray(address=address, logging_level="ERROR", log_to_driver=False,
                       **({"_node_ip_address": "127.0.0.1"} if host in ("127.0.0.1", "localhost") else {}))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported as one line
            outcome.append(exc)

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout_s)  # the main thread stays free to take SIGINT/SIGTERM
    if not outcome:
        return (f"no Ray cluster answered at {address} within {timeout_s:.0f}s (is it running? a `ray start` "
                "cluster also needs RAY_AUTH_MODE=token and its token: `ray get-auth-token`)")
    if outcome[0] is not None:
        return f"could not join the Ray cluster at {address}: {_one_line(outcome[0])}"
    return None


def _approvals(args: argparse.Namespace) -> int:
    address = args.address or os.environ.get("RAY_ADDRESS")
    if not address:
        print("dsh-actors approvals: no cluster to join; pass --address or set RAY_ADDRESS", file=sys.stderr)
        return 2
    _stop_on_signals()
    problem = _join(address, args.timeout)
    if problem is not None:
        print(f"dsh-actors approvals: {problem}", file=sys.stderr, flush=True)
        os._exit(1)  # a connection attempt may still be retrying in Ray's threads: do not wait for it
    import ray

    from .runtime.registry.approval import ApprovalQueue

    queue = ApprovalQueue(args.registry, args.namespace)
    try:
        try:
            queue._handle()
        except ValueError:
            print(f"dsh-actors approvals: registry {args.registry!r} has no approval queue in namespace "
                  f"{args.namespace!r} (is the name right? a registry's queue exists once it called "
                  "registry.approvals())", file=sys.stderr)
            return 1
        if args.action == "list":
            pending = queue.pending().result(timeout_s=args.timeout)
            if args.json:
                print(json.dumps(pending))
            elif not pending:
                print("no pending approvals")
            for item in [] if args.json else pending:
                reason = f" — {item['reason']}" if item.get("reason") else ""
                print(f"{item['id']}  {item['agent']}  {item['tool_name']}  ({item['call_id']}){reason}")
            return 0
        if args.action == "policy":
            queue.set_policy(args.target, args.agent).result(timeout_s=args.timeout)
            print(f"approval policy is now {args.target}" + (f" for {args.agent}" if args.agent else ""))
            return 0
        answer = queue.allow if args.action == "allow" else queue.reject
        if answer(args.target).result(timeout_s=args.timeout):
            print(f"{args.action}ed {args.target}")
            return 0
        print(f"{args.target} is not pending (answered, cancelled, or unknown)", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"dsh-actors approvals: {_one_line(exc)}", file=sys.stderr)
        return 1
    finally:
        ray.shutdown()


def _eval(args: argparse.Namespace) -> int:
    import asyncio

    from .eval.job import example_episodes, run_eval

    from .agent import ModelConfig
    from .eval.job import PluginError, RunFolderError

    paths = args.episodes or [str(example_episodes())]
    model = None
    if args.base_url and not args.model:
        print("dsh-actors eval: --base-url needs --model (the model's name at that endpoint)", file=sys.stderr)
        return 2
    if args.model:
        model = ModelConfig(model=args.model, api_key_env=args.api_key_env, concurrency=args.model_concurrency,
                            token_ids=args.token_ids,
                            **({"base_url": args.base_url} if args.base_url else {}))
    try:
        summary = asyncio.run(run_eval(paths, args.out, concurrency=args.concurrency,
                                       live=None if args.quiet else sys.stdout, progress=sys.stderr,
                                       resume=args.resume, overwrite=args.overwrite, model=model, tools=args.tools,
                                       workspace=args.workspace, reference_tools=not args.no_reference_tools,
                                       approvals=args.approvals, runners_per_node=args.runners_per_node,
                                       shared_out=args.shared_out, tool_timeout_s=args.tool_timeout,
                                       environments=args.environments, keep_workspaces=args.keep_workspaces,
                                       retry_infra=args.retry_infra, repeat=args.repeat))
    except (RunFolderError, PluginError, ValueError) as exc:
        print(f"dsh-actors eval: {_one_line(exc)}", file=sys.stderr)
        return 2
    # The summary goes to stdout: under `ray job submit` that is the job's log.
    print(Path(summary["out"], "summary.md").read_text())
    print(f"outputs: {summary['out']}")
    return 0 if summary["episodes_failed"] == 0 else 1


def _serve(args: argparse.Namespace) -> int:
    """Run the MCP gateway until SIGINT or SIGTERM, then take down what it made."""
    import signal
    import threading
    import uuid

    from .eval.plugins import PluginError, load_tools
    from .runtime.client import ToolRegistry
    from .runtime.local import ensure_ray
    from .tools.workspace import AgentWorkspaces

    try:
        from .serve import GatewayConfig, serve_mcp, serve_running, stop_mcp
    except ImportError as exc:
        print(f"dsh-actors serve: {exc.name} is missing: pip install 'dsh-actors[serve]'", file=sys.stderr)
        return 2
    from .serve.access import load_tokens
    from .serve.gateway import LOOPBACK_HOSTS

    from .eval.policies import policy_listeners
    from .serve.environments import GatewayEnvironments
    from .tools import reference_tools

    if args.reference_tools and not args.workspaces:
        print("dsh-actors serve: --reference-tools needs --workspaces (each agent works in its own folder)",
              file=sys.stderr)
        return 2
    name = args.registry or f"mcp-{uuid.uuid4().hex[:8]}"
    places: Any = AgentWorkspaces(args.workspaces) if args.workspaces else None
    if places is not None and args.environments == "native":  # each agent's tools act in its environment
        places = GatewayEnvironments(places, name, idle_s=args.idle_end)
    try:
        definitions = list(reference_tools(places)) if args.reference_tools else []
        definitions += [d for spec in args.tools for d in load_tools(spec, places)]
        tokens = load_tokens(args.tokens) if args.tokens else None
        listeners = policy_listeners([name for name in args.policies.split(",") if name])
    except (PluginError, ValueError) as exc:
        print(f"dsh-actors serve: {_one_line(exc)}", file=sys.stderr)
        return 2
    hosts = list(LOOPBACK_HOSTS) + [h if ":" in h else f"{h}:*" for h in args.allowed_host]
    if args.host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::"):
        hosts.append(f"{args.host}:*")
    ensure_ray()
    runtime = None
    if args.mode != "native":
        from .codemode.runtime import CodeRuntimeConfig

        runtime = CodeRuntimeConfig()
    registry = ToolRegistry.connect(name, scope_hosting="shared", mode=args.mode, code_runtime=runtime)
    ours = not serve_running()  # Serve started for this gateway alone ends with it
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    try:
        for definition in definitions:
            registry.register(definition).result(120)
        for event, listener in listeners:  # every agent's, in the order given
            registry.on(event, listener).result(120)
        registry.approvals(policy=args.approvals).result(120)
        config = GatewayConfig(name, logs=args.logs, tokens=tokens, allowed_hosts=hosts)
        try:
            url = serve_mcp(config, host=args.host, port=args.port, num_replicas=args.replicas, ingress=args.ingress,
                            max_replicas_per_node=args.max_replicas_per_node)
        except OSError as exc:  # the port is taken
            print(f"dsh-actors serve: {_one_line(exc)}", file=sys.stderr)
            return 2
        print(f"dsh-actors serve: registry {name!r}, {len(definitions)} tool(s); an agent's endpoint: {url}",
              flush=True)
        stopped.wait()
    finally:
        try:
            stop_mcp(shutdown_serve=ours)
        finally:
            registry.shutdown()
    print("dsh-actors serve: stopped", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dsh-actors", description="Tool registry and pipeline on Ray.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="register tools and policies, run calls, print results and cards")
    evaluate = commands.add_parser("eval", help="run episode files as a batch evaluation on Ray")
    evaluate.add_argument("episodes", nargs="*", help="JSON Lines episode files (default: the shipped examples)")
    evaluate.add_argument("--out", default="eval-out", help="output folder (logs, summary.json, summary.md)")
    evaluate.add_argument("--concurrency", type=int, default=64, help="episodes in flight at once, over the cluster")
    evaluate.add_argument("--runners-per-node", type=int,
                          help="episode runners per node (default: one per 4 CPUs of the node, 1 to 8)")
    evaluate.add_argument("--tools", action="append", default=[], metavar="MODULE:NAME",
                          help="your own tools: a list of definitions or a function returning one (repeatable)")
    evaluate.add_argument("--no-reference-tools", action="store_true",
                          help="register only --tools (not bash, read_file, write_file, edit_file)")
    evaluate.add_argument("--workspace", help="folder each episode gets its own copy of (default: the shipped one)")
    evaluate.add_argument("--approvals", choices=["never", "always", "ask"], default="never",
                          help="asks: rejected (never), allowed (always), or waiting for `dsh-actors approvals`")
    evaluate.add_argument("--tool-timeout", type=float, default=600.0, metavar="SECONDS",
                          help="every tool call's deadline (default 600; an episode's limits.tool_timeout_s "
                               "or a tool's own timeout_ms wins)")
    evaluate.add_argument("--environments", choices=["native", "host"], default="native",
                          help="native (default): each episode's tools run in an isolated environment of its own; "
                               "host: on the host in its workspace, with no walls (only for commands you trust)")
    evaluate.add_argument("--keep-workspaces", choices=["never", "failed", "all"], default="failed",
                          help="whose workspaces stay on their node once their episode ends (default: failed)")
    evaluate.add_argument("--repeat", type=int, default=1, metavar="K",
                          help="run each episode K times (each run an episode <id>.r<k>; an episode's own repeat "
                               "wins): the summary gives pass@k and pass^k per task")
    evaluate.add_argument("--retry-infra", type=int, default=0, metavar="N",
                          help="run an episode the infrastructure ended (a lost runner, environment, tool server or "
                               "endpoint) up to N more times, from scratch; never one the model ended")
    evaluate.add_argument("--shared-out", action="store_true",
                          help="--out is on storage every node mounts: runners write workspaces and logs there")
    evaluate.add_argument("--quiet", action="store_true", help="no live cards, only progress")
    evaluate.add_argument("--resume", action="store_true",
                          help="--out holds an earlier run: keep its finished episodes, run the others")
    evaluate.add_argument("--overwrite", action="store_true", help="--out holds an earlier run: start over")
    evaluate.add_argument("--model", help="model for episodes with a task (OpenAI-compatible Chat Completions)")
    evaluate.add_argument("--base-url", help="the model endpoint, e.g. http://127.0.0.1:8000/v1 (default: OpenAI's)")
    evaluate.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    evaluate.add_argument("--model-concurrency", type=int, default=64, help="model requests in flight at once")
    evaluate.add_argument("--token-ids", action="store_true",
                          help="keep each model turn's token ids and logprobs as the endpoint sends them (vLLM)")
    replay = commands.add_parser("replay", help="re-run session logs against a policy set; report what differs")
    replay.add_argument("logs", nargs="+")
    replay.add_argument("--policies", required=True, help="comma-separated policy names (see dsh_actors.eval.policies)")
    replay.add_argument("--json", action="store_true")
    show = commands.add_parser("show", help="render a session log's calls as cards")
    show.add_argument("log")
    show.add_argument("--workspace", help="workspace root the tools ran in (for card paths)")
    export = commands.add_parser("export", help="a run's episodes as rows (JSON Lines or Parquet)")
    export.add_argument("run", help="a run folder (eval --out)")
    export.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    export.add_argument("--out", help="output file (default: RUN/episodes.jsonl or .parquet)")
    shapes = export.add_mutually_exclusive_group()
    shapes.add_argument("--rl", dest="shape", action="store_const", const="rl",
                        help="prompt + messages + reward rows (RL trainers)")
    shapes.add_argument("--messages", dest="shape", action="store_const", const="messages",
                        help="one conversation per row: messages and tools (chat fine-tuning)")
    catalog = commands.add_parser("catalog", help="write the generated docs: the shipped tools' catalog "
                                  "(docs/tool-catalog.md) and the episode format (docs/episode-format.md)")
    catalog.add_argument("--out", default="docs/tool-catalog.md")
    catalog.add_argument("--format-out", default="docs/episode-format.md")
    serve = commands.add_parser("serve", help="serve each agent's tools as an MCP server (Streamable HTTP, Ray Serve)")
    serve.add_argument("--tools", action="append", default=[], metavar="MODULE:NAME",
                       help="tool definitions to serve: a list, or a function of the agents' workspaces (repeatable)")
    serve.add_argument("--workspaces", metavar="DIR",
                       help="each agent works in DIR/<agent> (which must exist): what --tools functions are given")
    serve.add_argument("--logs", metavar="DIR",
                       help="each agent's session log, DIR/<agent>.log, records its calls (default: no log)")
    serve.add_argument("--reference-tools", action="store_true",
                       help="serve bash, read_file, write_file and edit_file too, each agent in its workspace")
    serve.add_argument("--environments", choices=["native", "host"], default="native",
                       help="native (default): each agent's tools act in an isolated environment of its own, "
                            "started at its first call, ended with the gateway (or --idle-end); host: on the host in its "
                            "workspace, with no walls (only for commands you trust)")
    serve.add_argument("--idle-end", type=float, default=None, metavar="SECONDS",
                       help="end an agent's environment no call used for SECONDS (its next call starts a new "
                            "one; set it above 4/3 of the longest command's timeout). Default: they end with the gateway")
    serve.add_argument("--policies", default="", metavar="NAME,...",
                       help="named policies for every agent's calls, in order, as an episode's \"policies\" "
                            "(deny-destructive, redact-secrets, ask-writes, timeout, retry, fleet-limit:TOOL=N)")
    serve.add_argument("--approvals", choices=["never", "always", "ask"], default="ask",
                       help="asks: rejected (never), allowed (always), or waiting for `dsh-actors approvals` (default)")
    serve.add_argument("--mode", choices=["native", "code", "both"], default="native",
                       help="what each agent's tools/list holds: its tools (native), run_code alone with the tools "
                            "as the SDK of its programs (code), or both")
    serve.add_argument("--registry", help="the registry's name (default: a new one)")
    serve.add_argument("--host", default="127.0.0.1", help="where the gateway listens (default: loopback)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--replicas", type=int, default=1, help="gateway replicas (each answers any request)")
    serve.add_argument("--max-replicas-per-node", type=int, default=None, metavar="N",
                       help="at most N replicas on one node (1: one per node)")
    serve.add_argument("--ingress", choices=["direct", "proxy"], default="direct",
                       help="direct: each replica listens on --port of its node itself (the default: the least CPU "
                            "per call); proxy: through Serve's HTTP proxy (ports shared by several gateways, "
                            "Serve's request-based autoscaling)")
    serve.add_argument("--tokens", metavar="FILE",
                       help='a JSON file {"<token>": ["<agent>", ...] or "*"}: each request needs a bearer token '
                            "bound to its agent (default: none needed; the gateway listens on loopback)")
    serve.add_argument("--allowed-host", action="append", default=[], metavar="HOST[:PORT]",
                       help="a name clients reach the gateway by, accepted in the Host header beside the loopback "
                            "names and --host (DNS-rebinding protection; repeatable)")
    approvals = commands.add_parser(
        "approvals", help="list and answer pending approval requests",
        description="List and answer the pending asks of a registry's approval queue, from any shell.",
        epilog="--address is the Ray cluster's GCS address (host:port). A driver that started its own "
               "local Ray (ToolRegistry.connect without RAY_ADDRESS) prints the full command, address "
               "included, on its console each time an ask is queued; in that driver the address is "
               "ray.get_runtime_context().gcs_address.")
    approvals.add_argument("action", choices=["list", "allow", "reject", "policy"])
    approvals.add_argument("target", nargs="?", help="request id (allow/reject) or ask|never|always (policy)")
    approvals.add_argument("--registry", default="default", help="registry name (default: default)")
    approvals.add_argument("--namespace", default="dsh-actors")
    approvals.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS)")
    approvals.add_argument("--agent", help="policy: set it for one agent only")
    approvals.add_argument("--json", action="store_true", help="list: print JSON")
    approvals.add_argument("--timeout", type=float, default=30.0,
                           help="seconds to wait for the cluster, and for each answer (default: 30)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import main as demo_main

        return demo_main()
    if args.command == "eval":
        return _eval(args)
    if args.command == "serve":
        return _serve(args)
    if args.command == "replay":
        from .eval.replay import replay_logs

        try:
            rows = replay_logs(args.logs, [p for p in args.policies.split(",") if p])
        except (OSError, ValueError, HarnessError) as exc:
            print(f"dsh-actors replay: {_one_line(exc)}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for row in rows:
                print(f"{row['log']} {row['call_id']} {row['name']}: {row['recorded']} -> {row['replayed']}"
                      + (f" — {row['text']}" if row["replayed"] != "ok" else ""))
            print(f"{len(rows)} call(s) would have had a different outcome")
        return 0
    if args.command == "show":
        from .eval.show import show_log

        try:
            text, damage = show_log(args.log, args.workspace)
        except (OSError, HarnessError) as exc:
            print(f"dsh-actors show: {_one_line(exc)}", file=sys.stderr)
            return 2
        print(text)
        if damage is not None:
            print(f"dsh-actors show: {damage}", file=sys.stderr)
        return 1 if damage is not None else 0  # a torn tail is damage too: the last append is lost
    if args.command == "export":
        from .eval.export import export_run

        shape = args.shape or "episodes"
        suffix = "" if shape == "episodes" else f"-{shape}"
        target = Path(args.out or Path(args.run) / f"episodes{suffix}.{args.format}")
        try:
            count = export_run(args.run, target, args.format, shape)
        except (OSError, HarnessError) as exc:
            print(f"dsh-actors export: {_one_line(exc)}", file=sys.stderr)
            return 2
        print(f"wrote {count} episode rows to {target}")
        return 0
    if args.command == "catalog":
        from .catalog import write_catalog
        from .eval.reference import write_episode_reference

        print(f"wrote {write_catalog(args.out)} and {write_episode_reference(args.format_out)}")
        return 0
    if args.action != "list" and not args.target:
        parser.error(f"approvals {args.action} needs a target")
    return _approvals(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
