"""``hindsight ui``: serve the memory inspector (see hindsight_adapters/ui)."""

from __future__ import annotations

import signal

import typer

from hindsight_core.errors import missing_extra

from ._app import (
    app,
    cli_errors,
    emit_json_line,
    err_console,
    load_server_settings,
    parse_namespace,
)

UI_PACKAGES = {"starlette", "uvicorn", "jinja2", "multipart", "python_multipart"}


@app.command()
def ui(
    host: str = typer.Option(
        "127.0.0.1",
        help="Interface to bind; beyond loopback a token (HINDSIGHT_UI_TOKEN) is required.",
    ),
    port: int = typer.Option(8766, min=1, max=65535, help="TCP port."),
    namespace: str = typer.Option(
        "default", "--namespace", "-n", help="Namespace opened first (labels joined by '/')."
    ),
    scope: str | None = typer.Option(
        None, help="Only show this namespace and those under it (labels joined by '/')."
    ),
    token: str | None = typer.Option(
        None,
        envvar="HINDSIGHT_UI_TOKEN",
        show_envvar=True,
        help="Require this bearer token (default: the ui_token setting).",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON line saying where the inspector listens."
    ),
) -> None:
    """Serve the memory inspector: browse, search and curate lessons in a web page."""
    with cli_errors():
        try:
            import uvicorn

            from hindsight_adapters.ui import create_app, is_loopback
        except ImportError as exc:
            if (exc.name or "").split(".")[0] not in UI_PACKAGES:
                raise
            raise missing_extra("starlette/uvicorn/jinja2", "ui") from None
        from hindsight_core.storage.embedded import exit_on_signals

        settings = load_server_settings()
        if token is None and settings.ui_token is not None:
            token = settings.ui_token.get_secret_value()
        loopback = is_loopback(host)
        if not loopback and token is None:
            err_console.print(
                f"[red]error:[/red] refusing to serve the inspector on {host} without a token: "
                "set HINDSIGHT_UI_TOKEN (or --token), or bind to 127.0.0.1.",
                highlight=False,
            )
            raise typer.Exit(2)
        # A blank token is refused here (ConfigurationError), not taken as "no token".
        application = create_app(
            settings=settings,
            namespace=parse_namespace(namespace),
            scope=parse_namespace(scope) if scope else None,
            token=token,
            loopback_only=loopback,
            warm_up=True,
        )
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}/"
        err_console.print(
            f"Hindsight inspector on {url}" + (" (token required)" if token else ""),
            markup=False,
            highlight=False,
        )
        if as_json:
            emit_json_line({"server": "ui", "url": url, "token_required": token is not None})
        # SIGTERM/SIGINT exit through SystemExit after uvicorn's graceful shutdown, so the
        # embedded PostgreSQL is released.
        exit_on_signals((signal.SIGTERM, signal.SIGINT))
        uvicorn.run(application, host=host, port=port, log_level="warning", proxy_headers=False)
