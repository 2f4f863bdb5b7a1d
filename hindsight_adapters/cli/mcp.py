"""``hindsight mcp``: the MCP server over stdio (default) or streamable HTTP (``--http``)."""

from __future__ import annotations

import typer

from hindsight_core.errors import missing_extra

from ._app import app, cli_errors, emit_json_line, load_server_settings


@app.command()
def mcp(
    http: bool = typer.Option(False, "--http", help="Serve streamable HTTP instead of stdio."),
    host: str | None = typer.Option(
        None, "--host", help="HTTP bind address (default: HINDSIGHT_MCP_HOST or 127.0.0.1)."
    ),
    port: int | None = typer.Option(
        None, "--port", help="HTTP port (default: HINDSIGHT_MCP_PORT or 8765)."
    ),
    namespace: str | None = typer.Option(
        None,
        "--namespace",
        "-n",
        help="stdio namespace, labels joined by '/' (default: HINDSIGHT_NAMESPACE or default). "
        "Over HTTP each token's namespace applies (HINDSIGHT_MCP_TOKENS).",
    ),
    read: list[str] | None = typer.Option(
        None,
        "--read",
        "-r",
        help="A namespace (or 'prefix/*') this server may also read, besides its own; "
        "repeat for more (default: HINDSIGHT_MCP_READ). Over HTTP, each token's read= "
        "applies. See docs/sharing.md.",
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="With --http: print one JSON line saying where the server "
        "listens (over stdio, stdout is the MCP protocol itself).",
    ),
) -> None:
    """Serve Hindsight to any MCP client (stdio for one local agent, HTTP for many)."""
    if not http and (host is not None or port is not None):
        raise typer.BadParameter("--host and --port apply to --http only")
    if not http and as_json:
        raise typer.BadParameter(
            "--json applies to --http only: over stdio, stdout carries the MCP protocol"
        )
    with cli_errors():
        try:
            from hindsight_adapters.mcp import serve_http, serve_stdio
        except ImportError as exc:
            if (exc.name or "").split(".")[0] not in {"mcp", "uvicorn", "starlette"}:
                raise
            raise missing_extra("the MCP SDK", "mcp") from None
        settings = load_server_settings()
        if http:
            serve_http(
                settings,
                host=host,
                port=port,
                namespace=namespace,
                read=read,
                announce=emit_json_line if as_json else None,
            )
        else:
            serve_stdio(settings, namespace=namespace, read=read)
