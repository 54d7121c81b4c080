"""A real SMTP server on loopback (aiosmtpd) that keeps what it accepts, refuses the
recipients it is told to, and can require STARTTLS or speak implicit TLS with a
self-signed certificate made here."""

from __future__ import annotations

import email
import email.policy
import ipaddress
import socket
import ssl
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.message import EmailMessage
from pathlib import Path

from aiosmtpd.controller import Controller
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    over_tls: bool
    raw: bytes = b""     # the message as it came over the wire


@dataclass
class Mailbox:
    """`refuse` maps a recipient address to the reply that refuses it (e.g. "550 5.1.1 no
    such user"), `refuse_data` refuses every message; everything else is accepted."""

    tls_context: ssl.SSLContext | None = None      # with require_starttls: STARTTLS is a must
    implicit_tls: bool = False                      # smtps: TLS from the first byte
    refuse: dict[str, str] = field(default_factory=dict)
    refuse_data: str | None = None                  # the reply to every DATA, e.g. "554 5.7.1 spam"
    received: list[Received] = field(default_factory=list)

    def __post_init__(self):
        self.port = _free_port()
        kwargs: dict = {}
        if self.implicit_tls:
            kwargs["ssl_context"] = self.tls_context
        elif self.tls_context is not None:
            kwargs.update(tls_context=self.tls_context, require_starttls=True)
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port, **kwargs)
        self.controller.start()

    @property
    def url(self) -> str:
        return f"{'smtps' if self.implicit_tls else 'smtp'}://127.0.0.1:{self.port}"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.refuse:
            return self.refuse[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        if self.refuse_data:
            return self.refuse_data
        message = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        self.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos), message,
                                      over_tls=session.ssl is not None or self.implicit_tls,
                                      raw=envelope.original_content))
        return "250 Message accepted for delivery"

    def close(self) -> None:
        self.controller.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class SelfSigned:
    cert_file: Path      # also the CA file a client trusts
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


def self_signed(directory: Path) -> SelfSigned:
    """A self-signed CA certificate for localhost and 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cs test smtp")])
    now = datetime.now(timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "smtp-cert.pem", directory / "smtp-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return SelfSigned(cert_file, key_file)
