"""The contract every authentication provider keeps (:class:`~bkframe.core.interfaces.auth.AuthProvider`),
as a test suite an auth plugin runs on its provider.

Subclass in a test module of your plugin and provide the ``auth_section`` fixture: the keys
of a bookie's ``[auth]`` section that pick and configure the provider::

    from bkframe.testing.auth_contract import AuthProviderContract

    class TestMyProvider(AuthProviderContract):
        @pytest.fixture
        def auth_section(self):
            return {"provider": "my_auth", "secret_file": "/etc/bkframe/secret"}

The provider is made through the plugin manager, as a bookie makes it (override ``plugins``
to register a plugin that is not installed). ``peer`` is the connection authenticated (a TLS
client with a certificate; override it for a provider that wants another), and
``refused_credentials`` what a provider that requires auth must refuse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from bkframe.core.interfaces.auth import AuthenticationError, AuthProvider, Peer
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.plugin_contract import PluginContract


class AuthProviderContract(PluginContract):
    """What every auth provider does; see the module docstring."""

    @pytest.fixture
    def auth_section(self) -> Mapping[str, Any]:
        raise NotImplementedError("a subclass provides the auth_section fixture: {'provider': NAME, ...its options}")

    @pytest.fixture
    def provider(self, plugins: PluginManager, auth_section: Mapping[str, Any]) -> AuthProvider:
        return plugins.auth_provider_from_section(auth_section, source="the contract suite: [auth]")

    @pytest.fixture
    def peer(self) -> Peer:
        return Peer("127.0.0.1:40000", certificate_subject="CN=contract-client,O=bkframe", tls=True)

    def refused_credentials(self, provider: AuthProvider) -> list[tuple[str, bytes]]:
        """(method, credential) pairs the provider must refuse when it requires auth: by
        default its own credential altered, and an empty one."""
        method, credential = provider.client_credential()
        return [(method, credential + b"-altered"), (method, b"")]

    def test_says_what_it_needs(self, provider: AuthProvider) -> None:
        assert isinstance(provider.requires_auth, bool)
        assert isinstance(provider.needs_client_certificate, bool)

    def test_accepts_its_own_client_credential(self, provider: AuthProvider, peer: Peer) -> None:
        """What a bookie's own client sends its peers (same provider and options) is accepted;
        the principal is a name for logs, never the secret."""
        method, credential = provider.client_credential()
        assert isinstance(method, str) and method and isinstance(credential, bytes)
        principal = provider.authenticate(peer, method, credential)
        assert isinstance(principal, str) and principal
        if len(credential) >= 4:
            assert credential.decode(errors="replace") not in principal, "the principal shows the credential"

    def test_refuses_wrong_credentials_without_showing_the_secret(self, provider: AuthProvider, peer: Peer) -> None:
        if not provider.requires_auth:
            pytest.skip("the provider accepts every connection (requires_auth = False)")
        secret = provider.client_credential()[1]
        for method, credential in self.refused_credentials(provider):
            with pytest.raises(AuthenticationError) as refused:
                provider.authenticate(peer, method, credential)
            if len(secret) >= 4:
                assert secret.decode(errors="replace") not in str(refused.value), "the refusal shows the secret"
