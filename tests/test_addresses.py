"""base/addresses.py: the address policy every client of a URL someone else
chose shares (the help center's importers, chat's actions). Its cases are in
tests/helpcenter/importers/test_fetch_addresses.py, through fetch's names."""

import ast
import ipaddress
from pathlib import Path

import pytest

from base import addresses
from helpcenter.importers import fetch


def test_fetch_still_offers_the_moved_names():
    assert (fetch.public, fetch.NOT_PUBLIC_V6, fetch.IPAddress) == (
        addresses.public,
        addresses.NOT_PUBLIC_V6,
        addresses.IPAddress,
    )


@pytest.mark.parametrize(
    ("address", "expected"),
    [("93.184.215.14", True), ("10.0.0.5", False), ("::ffff:10.0.0.5", False), ("64:ff9b::a9fe:a9fe", False)],
)
def test_public(address, expected):
    assert addresses.public(ipaddress.ip_address(address)) is expected


def test_it_imports_the_standard_library_only():
    """No settings, no Django: anyone may import it, outside a configured project too."""
    tree = ast.parse(Path(addresses.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"__future__", "ipaddress"}
