"""The address check (SSRF): which addresses an importer may connect to,
and that it checks the address it actually connects to, on every
connection, over real sockets: a host name that resolves elsewhere on the
next connection (DNS rebinding) is refused then, and the Host header and
TLS's SNI still name the host."""

import ipaddress
import socket
import ssl
import threading

import pytest

from helpcenter.importers import fetch
from helpcenter.importers.fetch import Fetcher, Guard, PrivateAddress
from tests.certificates import self_signed

REFUSED = [
    # IPv4: this machine, private networks, link-local (cloud metadata), shared, reserved, multicast
    "127.0.0.1",
    "0.0.0.0",
    "10.0.0.8",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "192.0.2.1",
    "198.18.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "224.0.0.1",
    # IPv6: loopback, unspecified, link-local, unique local, documentation, multicast
    "::1",
    "::",
    "fe80::1",
    "fd00::2",
    "2001:db8::1",
    "ff02::1",
    "ff0e::1",
    # IPv4-mapped: the IPv4 address itself to the kernel
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.8",
    # NAT64, whatever the IPv4 address it embeds (a translator on the path decides where it goes)
    "64:ff9b::a9fe:a9fe",
    "64:ff9b::7f00:1",
    "64:ff9b::808:808",
    "64:ff9b:1::a9fe:a9fe",
    "64:ff9b:1:ffff::808:808",
    # 6to4, whatever it embeds
    "2002:a9fe:a9fe::1",
    "2002:7f00:1::1",
    "2002:808:808::1",
    # Teredo
    "2001::1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    # IPv4-compatible (deprecated), whatever it embeds
    "::a9fe:a9fe",
    "::7f00:1",
    "::808:808",
    # IPv4-translated (SIIT), whatever it embeds
    "::ffff:0:a9fe:a9fe",
    "::ffff:0:7f00:1",
    "::ffff:0:808:808",
    # site-local (deprecated)
    "fec0::1",
    "fec0:0:0:1::1",
    "feff:ffff::1",
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", REFUSED)
def test_addresses_that_are_not_public_are_refused(address):
    assert not fetch.public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address):
    assert fetch.public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "url",
    [
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",
        "http://[64:ff9b:1::a9fe:a9fe]/",
        "http://[2002:a9fe:a9fe::1]/",
        "http://[::a9fe:a9fe]/",
        "http://[::ffff:0:a9fe:a9fe]/",
        "http://[fec0::1]/",
    ],
)
def test_a_url_at_such_an_address_is_refused_before_it_connects(settings, url):
    settings.KOOKEE_IMPORT_ALLOW_PRIVATE = False
    with Fetcher(url) as fetcher, pytest.raises(PrivateAddress, match="private or local address"):
        fetcher.get(url)


class Resolver:
    """DNS as a test plays it: a host name's answer is what `answer` says
    at the time of each lookup."""

    def __init__(self, answer: list[str]) -> None:
        self.answer = answer
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        return list(self.answer)


def site_guard(resolver: Resolver) -> Guard:
    # The test's server is on 127.0.0.1: here it stands for the site's one
    # public address, the only address that the real check does not decide.
    site = ipaddress.ip_address("127.0.0.1")
    return Guard(resolve=resolver, allowed=lambda address: address == site or fetch.public(address))


def test_a_host_that_resolves_to_a_private_address_later_is_refused_at_that_connection(site, settings):
    settings.KOOKEE_IMPORT_ALLOW_PRIVATE = False
    resolver = Resolver(["127.0.0.1"])
    url = f"http://docs.rebind.test:{site.port}/docs/"

    with Fetcher(url, network=site_guard(resolver)) as fetcher:
        # Connection: close, so that the next request needs a new connection.
        assert fetcher.get(url, headers={"Connection": "close"}).status == 200
        resolver.answer = ["169.254.169.254"]  # the rebinding
        with pytest.raises(PrivateAddress, match=r"docs\.rebind\.test is at a private or local address"):
            fetcher.get(url)
        resolver.answer = ["127.0.0.1", "10.0.0.8"]  # one of its addresses is enough
        with pytest.raises(PrivateAddress, match=r"\(10\.0\.0\.8\)"):
            fetcher.get(url)

    assert resolver.lookups == ["docs.rebind.test"] * 3  # one lookup a connection, no other
    assert [r["path"] for r in site.requests] == ["/docs/"]
    assert site.requests[0]["headers"]["host"] == f"docs.rebind.test:{site.port}"


def test_a_kept_alive_connection_is_not_looked_up_again(site, settings):
    settings.KOOKEE_IMPORT_ALLOW_PRIVATE = False
    resolver = Resolver(["127.0.0.1"])
    url = f"http://docs.rebind.test:{site.port}/docs/"

    with Fetcher(url, network=site_guard(resolver)) as fetcher:
        fetcher.get(url)
        resolver.answer = ["169.254.169.254"]
        fetcher.get(url)  # on the connection made to the address checked: nothing to rebind

    assert resolver.lookups == ["docs.rebind.test"]
    assert len(site.requests) == 2


def test_the_allow_private_setting_still_connects_to_the_address_resolved(site, settings):
    settings.KOOKEE_IMPORT_ALLOW_PRIVATE = True
    resolver = Resolver(["127.0.0.1"])
    url = f"http://intranet.wiki.test:{site.port}/docs/"

    with Fetcher(url, network=Guard(resolve=resolver)) as fetcher:
        assert fetcher.get(url).status == 200
    assert resolver.lookups == ["intranet.wiki.test"]


def test_tls_names_the_host_not_the_address_it_connects_to(tmp_path, settings):
    settings.KOOKEE_IMPORT_ALLOW_PRIVATE = False
    listener = TLSListener(tmp_path)
    resolver = Resolver(["127.0.0.1"])
    url = f"https://help.sni.test:{listener.port}/"
    try:
        # The certificate is self-signed: the handshake fails, after the
        # server has read the name the client asked for.
        with (
            Fetcher(url, network=site_guard(resolver)) as fetcher,
            pytest.raises(fetch.FetchError, match="ConnectError"),
        ):
            fetcher.get(url)
    finally:
        listener.close()
    assert listener.names and set(listener.names) == {"help.sni.test"}


class TLSListener:
    """A TLS server on a loopback port that records the name (SNI) each
    client hello asks for."""

    def __init__(self, folder) -> None:
        self.names: list[str | None] = []
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self_signed(folder, "help.sni.test"))
        context.sni_callback = lambda _socket, name, _context: self.names.append(name)
        self._context = context
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return  # closed
            with connection:
                try:
                    self._context.wrap_socket(connection, server_side=True).close()
                except (ssl.SSLError, OSError):
                    pass  # the client refused the certificate

    def close(self) -> None:
        self._socket.shutdown(socket.SHUT_RDWR)  # wakes the accept() waiting in its thread (close would not)
        self._socket.close()
        self._thread.join(timeout=5)
