"""The memory inspector: a small web page to see, search and curate what agents learned.

Run it with ``hindsight ui`` (needs ``pip install 'agent-hindsight[ui]'``), or build the
Starlette app yourself::

    from hindsight_adapters.ui import create_app
    app = create_app(namespace=("acme", "agent"), token="s3cret")

Server-rendered HTML (Jinja2) with a little CSS and JavaScript shipped in this
package; nothing is fetched from the network at run time. Every action is a
call into :class:`~hindsight_core.AsyncMemory`.
"""

from __future__ import annotations

from .._http import is_loopback
from .app import create_app

__all__ = ["create_app", "is_loopback"]
