"""`biaslab view`: the local, read-only web app over a warehouse (`biaslab.cli.view`)."""

from __future__ import annotations

import click

from .common import DEFAULT_HOST, DEFAULT_PORT, VIEW_URL, db_option

__all__ = ["view_command", "DEFAULT_HOST", "DEFAULT_PORT", "VIEW_URL"]


@click.command("view")
@db_option
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--host", default=DEFAULT_HOST, show_default=True,
              help="Address to bind; the default answers this machine only (another address exposes the "
                   "warehouse's contents to the network).")
@click.option("--no-browser", is_flag=True, help="Do not open a browser tab.")
def view_command(db: str, port: int, host: str, no_browser: bool) -> None:
    """A local, read-only web app over the warehouse: models, datasets and collections; each study's tables with
    every row linked to the stimuli behind it; search and filter stimuli by dataset, context, model, option,
    probability range and text; and a page per stimulus (/stimulus/<id>, the URL the reports link to) with the prompt
    as each model saw it, the exact-mode answer trie with each edge's probability and the parser's verdict, the
    samples with their parsed answers, per-token log-probabilities, and the same item across contexts, option
    orders and models. Every request opens the warehouse read-only (a collection may write meanwhile); nothing is
    ever written. Ctrl-C stops it."""
    import webbrowser

    from werkzeug.serving import make_server

    from ..warehouse.store import Warehouse
    from .view import create_app

    Warehouse.open(db, read_only=True).close()  # a missing or newer warehouse: one line now, not per page
    server = make_server(host, port, create_app(db), threaded=True)
    url = f"http://{host}:{server.server_port}/"
    click.echo(f"biaslab view: {url} over {db} (read-only); Ctrl-C stops it")
    if not no_browser:
        webbrowser.open(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("stopped")
    finally:
        server.server_close()
