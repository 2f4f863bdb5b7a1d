"""Read grants of MCP tokens and of the stdio server: the grammar, its errors, the rules.

No server here; the same grants over HTTP and stdio are in test_mcp_sharing.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hindsight_adapters._grants import Grant, load_tokens, parse_tokens, stdio_grant
from hindsight_core import Settings
from hindsight_core.errors import ConfigurationError

A, B, C = "a" * 32, "b" * 32, "c" * 32


def test_read_lists_keep_their_commas() -> None:
    tokens = parse_tokens(
        f"{A}=acme/agent-a;read=acme/shared,acme/agent-b;name=agent-a, {B}=acme/b;read=acme/*\n"
        f"{C}=acme/shared  # the team's own"
    )
    assert tokens == {
        A: Grant(("acme", "agent-a"), (("acme", "shared"), ("acme", "agent-b")), "agent-a"),
        B: Grant(("acme", "b"), (("acme", "*"),)),
        C: Grant(("acme", "shared")),
    }
    assert tokens[A].label == "agent-a" and tokens[B].label == "mcp:acme/b"
    # Options in any order; the read list goes on after a name= too.
    assert parse_tokens(f"{A}=acme/a;read=x/y;name=n,z/*")[A] == Grant(
        ("acme", "a"), (("x", "y"), ("z", "*")), "n"
    )


def test_configurations_from_before_read_grants_mean_the_same() -> None:
    """';' not followed by an option and '=' after the first are parts of a label."""
    assert parse_tokens(f"{A}=acme;x,{B}=k=v/y") == {
        A: Grant(("acme;x",)),
        B: Grant(("k=v", "y")),
    }


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(
            {
                A: {"write": "acme/agent-a", "read": ["acme/shared", "acme/*"], "name": "agent-a"},
                B: "acme/b",
                C: ["acme", "shared"],
            }
        ),
        f"{A}=acme/agent-a;name=agent-a;read=acme/shared,acme/*\n{B}=acme/b\n{C}=acme/shared",
    ],
)
def test_json_and_text_forms_in_env_and_file(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = {
        A: Grant(("acme", "agent-a"), (("acme", "shared"), ("acme", "*")), "agent-a"),
        B: Grant(("acme", "b")),
        C: Grant(("acme", "shared")),
    }
    monkeypatch.setenv("HINDSIGHT_MCP_TOKENS", text)
    assert load_tokens(Settings()) == expected
    monkeypatch.delenv("HINDSIGHT_MCP_TOKENS")
    path = tmp_path / "tokens"
    path.write_text(text)
    assert load_tokens(Settings(mcp_tokens_file=path)) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (f"{A}=acme/a;read=acme/*/x", r"token 1 \(writes acme/a\): read: '\*' may only be"),
        (f"{A}=acme/a;read=*", r"token 1 \(writes acme/a\): read: '\*' alone"),
        (f"{A}=acme/a;read=acme//x", r"token 1 \(writes acme/a\): read\[1\] is empty"),
        (f"{A}=acme/a,{B}=acme/b;name=", r"token 2 \(writes acme/b\): name must be"),
        (f"{A}=acme/a,{B}=acme/b, acme/c", r"after token 2 \(writes acme/b\).*continues a read"),
        (f"{A}=acme//a", r"token 1: namespace\[1\] is empty"),
        (json.dumps({A: {"read": ["acme/x"]}}), r"token 1: 'write' \(the namespace\) is missing"),
        (json.dumps({A: {"write": "acme/a", "reed": []}}), r"token 1: unknown key\(s\) reed"),
        (
            json.dumps({A: {"write": "acme/a", "read": "acme/*/x", "name": "agent-a"}}),
            r"token 1 \(agent-a, writes acme/a\): read: '\*' may only",
        ),
        (json.dumps({A: {"write": "acme/a", "read": {"x": 1}}}), r"'read' must be a list"),
        (json.dumps([A]), r"must be an object"),
    ],
)
def test_bad_grants_name_the_token_but_never_its_secret(text: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match="HINDSIGHT_MCP_TOKENS") as excinfo:
        parse_tokens(text)
    message = str(excinfo.value)
    assert A not in message and B not in message and A[:8] not in message
    assert re.search(says, message), message


def test_a_grant_reads_at_most_what_one_search_may() -> None:
    from hindsight_adapters._grants import MAX_LABEL_CHARS, MAX_READS
    from hindsight_core.memory.scope import MAX_BY_CHARS, MAX_READ_ENTRIES

    assert (MAX_READS + 1, MAX_LABEL_CHARS) == (MAX_READ_ENTRIES, MAX_BY_CHARS)  # the core's
    many = ",".join(f"acme/n{i}" for i in range(MAX_READS + 1))
    with pytest.raises(ConfigurationError, match=r"token 1 \(writes acme/a\): 100 read patterns"):
        parse_tokens(f"{A}=acme/a;read={many}")
    with pytest.raises(ConfigurationError, match="--read: 100 read patterns"):
        stdio_grant(Settings(), None, [many])
    most = many.replace(",acme/n99", "")
    assert len(parse_tokens(f"{A}=acme/a;read={most},acme/n0")[A].read) == MAX_READS  # n0 once


def test_two_tokens_with_one_name_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="two tokens are named 'bot'"):
        load_tokens(Settings(mcp_tokens=f"{A}=acme/a;name=bot,{B}=acme/b;name=bot"))


def test_what_a_grant_reads_and_covers() -> None:
    grant = Grant(("acme", "a"), (("acme", "shared"), ("team", "*")))
    assert grant.readable == (("acme", "a"), ("acme", "shared"), ("team", "*"))
    assert grant.shares and not Grant(("acme", "a"), (("acme", "a"),)).shares
    for ns in (("acme", "a"), ("acme", "shared"), ("team",), ("team", "x", "y")):
        assert grant.reads(ns), ns
    for ns in (("acme", "b"), ("acme", "a", "sub"), ("acme", "shared", "sub"), ("teamx",)):
        assert not grant.reads(ns), ns
    assert grant.covers(("team", "x", "*")) and grant.covers(("acme", "shared"))
    # A granted namespace does not grant what is under it, nor a prefix what is beside it.
    assert not grant.covers(("acme", "shared", "*")) and not grant.covers(("acme", "*"))
    assert grant.describe() == "acme/a (its own), acme/shared, team/*"


def test_stdio_grant_from_option_or_setting() -> None:
    settings = Settings(namespace="acme/agent", mcp_read="acme/shared, team/*")
    assert stdio_grant(settings, None, None) == Grant(
        ("acme", "agent"), (("acme", "shared"), ("team", "*"))
    )
    # --read replaces the setting (explicit arguments win); commas split there too.
    assert stdio_grant(settings, "cli/ns", ["x/y", "z/*,x/y"]) == Grant(
        ("cli", "ns"), (("x", "y"), ("z", "*"))
    )
    assert stdio_grant(Settings(namespace="acme/agent"), None, None).label == "mcp:acme/agent"
    deep = Grant(tuple("x" * 150 for _ in range(3)))  # the core records at most 200 characters
    assert len(deep.label) == 200 and deep.label.startswith("mcp:xxx")
    with pytest.raises(ConfigurationError, match=r"--read: read: '\*' alone"):
        stdio_grant(settings, None, ["*"])
    with pytest.raises(ConfigurationError, match="HINDSIGHT_MCP_READ: read"):
        stdio_grant(Settings(mcp_read="a//b"), None, None)
