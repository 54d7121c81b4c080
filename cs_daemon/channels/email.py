"""The email channel (docs/channels.md, "Email"): an approved `email` intervention is one
`mailto:<address>` delivery (a user without an address fails at once); the team
invitation and the console's sign-in link are mail of their own kinds, written by their
composers (`COMPOSERS`), sent the same way.

One message per delivery, sent with smtplib to SMTP_URL (`smtp://[user:pass@]host:port`,
`?starttls=1` to upgrade with STARTTLS, `smtps://` for implicit TLS), From MAIL_FROM, To
the customer's address. The message is multipart/alternative (text and HTML) and carries
a one-click unsubscribe link in both bodies and in the `List-Unsubscribe` and
`List-Unsubscribe-Post` headers (RFC 8058).

TLS always verifies the server: against the system's CAs, or against SMTP_CA_FILE when
it is set. The whole attempt is bounded by the delivery deadline (10 s). A recipient or
message the server refuses with a 5xx reply is a permanent failure (no retry), and so is
mail to a user who opted out of email after it was approved; a 4xx reply, a dropped
connection or a timeout is retried on the delivery schedule.
"""

from __future__ import annotations

import html
import json
import smtplib
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from email import policy as email_policy
from email.message import EmailMessage
from email.utils import formatdate, make_msgid, parseaddr
from typing import Callable
from urllib.parse import parse_qs, unquote, urlsplit

from sqlalchemy.orm import Session

from ..customers.models import Customer
from ..delivery import service as delivery
from ..integrations.http import Outcome
from ..interventions.models import Intervention
from ..playbooks.models import Playbook
from . import optout
from .base import Planned, Undeliverable

NAME = "email"

DEFAULT_SUBJECT = "A message for you"


@dataclass(frozen=True)
class SmtpServer:
    """Where SMTP_URL points."""

    host: str
    port: int
    implicit_tls: bool
    starttls: bool
    username: str | None
    password: str | None


def server_of(smtp_url: str) -> SmtpServer:
    parts = urlsplit(smtp_url)
    implicit = parts.scheme == "smtps"
    starttls = parse_qs(parts.query).get("starttls", ["0"])[-1].lower() in ("1", "true", "yes")
    return SmtpServer(host=parts.hostname or "localhost", port=parts.port or (465 if implicit else 25),
                      implicit_tls=implicit, starttls=starttls and not implicit,
                      username=unquote(parts.username) if parts.username else None,
                      password=unquote(parts.password) if parts.password else None)


def subject_of(session: Session, playbook_id: str | None) -> str:
    """The playbook's goal, else its name, else a plain default."""
    playbook = session.get(Playbook, playbook_id) if playbook_id else None
    if playbook is None:
        return DEFAULT_SUBJECT
    hints = playbook.strategy_hints if isinstance(playbook.strategy_hints, dict) else {}   # stored data may not validate
    goal = str(hints.get("goal") or "").strip()
    text = goal or (playbook.name or "").strip()
    return (text[:1].upper() + text[1:]) if text else DEFAULT_SUBJECT


def text_body(message: str, unsubscribe_url: str) -> str:
    return (f"{message}\n\n--\nTo stop receiving these emails, unsubscribe: {unsubscribe_url}\n")


def html_body(message: str, unsubscribe_url: str) -> str:
    paragraphs = "".join(f"<p>{html.escape(p).replace(chr(10), '<br>')}</p>"
                         for p in message.split("\n\n") if p.strip())
    return ("<!doctype html>\n<html><body>\n"
            f"{paragraphs}\n"
            '<hr><p style="font-size:12px;color:#666">To stop receiving these emails, '
            f'<a href="{html.escape(unsubscribe_url, quote=True)}">unsubscribe</a>.</p>\n'
            "</body></html>\n")


def compose(*, mail_from: str, to: str, subject: str, message: str, unsubscribe_url: str,
            intervention_id: str | None) -> EmailMessage:
    msg = addressed(mail_from, to, subject, default_subject=DEFAULT_SUBJECT)
    msg["List-Unsubscribe"] = f"<{unsubscribe_url}>"
    msg["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    if intervention_id:
        msg["X-Service-Intervention-Id"] = intervention_id
    msg.set_content(text_body(message, unsubscribe_url))
    msg.add_alternative(html_body(message, unsubscribe_url), subtype="html")
    return msg


# Headers fold at RFC 5322's 998 characters, not 78: a value with no space to fold at (the
# List-Unsubscribe URL) would otherwise be RFC 2047-encoded, which a mail client does not
# decode in that header, and its one-click unsubscribe would be gone.
LONG_LINES = email_policy.default.clone(max_line_length=998)


def addressed(mail_from: str, to: str, subject: str, *, default_subject: str = "") -> EmailMessage:
    """A new message with its From, To, Subject (one line of at most 200 characters, else
    `default_subject`), Date and a Message-ID on the sender's domain: what every mail starts with."""
    msg = EmailMessage(policy=LONG_LINES)
    msg["From"] = mail_from
    msg["To"] = to
    msg["Subject"] = " ".join(subject.split())[:200] or default_subject
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = make_msgid(domain=_domain(mail_from))
    return msg


def _domain(mail_from: str) -> str:
    return parseaddr(mail_from)[1].rpartition("@")[2] or "localhost"


def tls_context(settings) -> ssl.SSLContext:
    """Verifying TLS: the system's CAs, or only those of SMTP_CA_FILE when it is set."""
    cafile = str(settings.smtp_ca_file) if settings.smtp_ca_file else None
    return ssl.create_default_context(cafile=cafile)


def send_message(server: SmtpServer, msg: EmailMessage, *, envelope_from: str, to: str,
                 context: ssl.SSLContext, deadline_s: float) -> None:
    """One SMTP conversation; a watchdog closes the socket at the deadline, so a server
    that answers slowly step by step cannot hold the attempt longer than deadline_s."""
    opened: list[smtplib.SMTP] = []
    watchdog = threading.Timer(deadline_s, _cut, args=(opened,))
    watchdog.daemon = True
    watchdog.start()
    try:
        if server.implicit_tls:
            smtp = smtplib.SMTP_SSL(server.host, server.port, timeout=deadline_s, context=context)
        else:
            smtp = smtplib.SMTP(server.host, server.port, timeout=deadline_s)
        opened.append(smtp)
        try:
            if server.starttls:
                smtp.starttls(context=context)
            if server.username:
                smtp.login(server.username, server.password or "")
            smtp.send_message(msg, from_addr=envelope_from, to_addrs=[to])
            _quit(smtp)
        finally:
            smtp.close()
    finally:
        watchdog.cancel()


def _cut(opened: list[smtplib.SMTP]) -> None:
    for smtp in opened:
        sock = getattr(smtp, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _quit(smtp: smtplib.SMTP) -> None:
    try:
        smtp.quit()
    except (smtplib.SMTPException, OSError):
        pass            # the message is accepted; a rude goodbye does not undo that


def refusal(exc: Exception, to: str) -> tuple[int | None, str, bool]:
    """(SMTP code, error, permanent) of a failed conversation. Only a 5xx refusal of the
    recipient or of the message is permanent; everything else is worth another try."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        code, reply = exc.recipients.get(to, next(iter(exc.recipients.values()), (None, b"")))
        return code, f"recipient refused: {code} {_text(reply)}", bool(code and code >= 500)
    if isinstance(exc, smtplib.SMTPDataError):
        return exc.smtp_code, f"message refused: {exc.smtp_code} {_text(exc.smtp_error)}", exc.smtp_code >= 500
    if isinstance(exc, smtplib.SMTPResponseException):
        return exc.smtp_code, f"smtp: {exc.smtp_code} {_text(exc.smtp_error)}", False
    return None, f"smtp: {type(exc).__name__}: {exc}", False


def _text(reply) -> str:
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)


def transport(claimed, secret, rt, now) -> Outcome:
    """One attempt: compose and send one message, answer the outcome."""
    started = time.monotonic()
    settings = rt.settings
    if not settings.smtp_url:
        return Outcome(None, None, "SMTP_URL is not set: the email channel cannot send", 0.0)
    to = claimed.url.split(":", 1)[1]
    body = json.loads(claimed.body)
    if claimed.kind in COMPOSERS:
        return _send_composed(rt, claimed, to, body, secret, started)
    if _opted_out(rt, claimed.tenant_id, body.get("user_id")):
        return Outcome(None, None, "the user opted out of email", _ms(started), permanent=True)
    unsubscribe_url = optout.link(settings.cs_public_url, settings.secret_key, claimed.tenant_id,
                                  body.get("user_id") or "", "email")
    try:
        msg = compose(mail_from=settings.mail_from, to=to, subject=body.get("subject") or DEFAULT_SUBJECT,
                      message=body.get("message_body") or "", unsubscribe_url=unsubscribe_url,
                      intervention_id=body.get("intervention_id"))
    except ValueError as exc:       # e.g. an address no header can carry: no retry makes it valid
        return Outcome(None, None, f"the message cannot be composed: {exc}", _ms(started), permanent=True)
    return _send(settings, msg, to, started)


def _send(settings, msg: EmailMessage, to: str, started: float) -> Outcome:
    try:
        send_message(server_of(settings.smtp_url), msg, envelope_from=parseaddr(settings.mail_from)[1],
                     to=to, context=tls_context(settings), deadline_s=delivery.DEADLINE_SECONDS)
    except (smtplib.SMTPException, OSError, ValueError) as exc:
        code, error, permanent = refusal(exc, to)
        return Outcome(code, None, error, _ms(started), permanent=permanent)
    return Outcome(250, f"accepted by {urlsplit(settings.smtp_url).hostname} for {to}", None, _ms(started))


class Unsendable(Exception):
    """The mail must not leave any more (e.g. its invitation was revoked): a permanent failure."""


# delivery kind -> compose(rt, claimed, body, to, secret) -> EmailMessage, for mail that is
# not an intervention (the team invitation); `secret` is the delivery's decrypted secret
Composer = Callable[..., EmailMessage]
COMPOSERS: dict[str, Composer] = {}


def _send_composed(rt, claimed, to: str, body: dict, secret: str, started: float) -> Outcome:
    try:
        msg = COMPOSERS[claimed.kind](rt, claimed, body, to, secret)
    except Unsendable as exc:
        return Outcome(None, None, str(exc), _ms(started), permanent=True)
    except ValueError as exc:
        return Outcome(None, None, f"the message cannot be composed: {exc}", _ms(started), permanent=True)
    return _send(rt.settings, msg, to, started)


def _opted_out(rt, tenant_id: str, user_id: str | None) -> bool:
    """Checked at send time too: mail approved before the user unsubscribed never leaves."""
    with rt.session(tenant_id) as session:
        customer = session.get(Customer, (tenant_id, user_id or ""))
        return customer is not None and bool({"email", "all"} & set(customer.opted_out or []))


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)


class Email:
    name = NAME
    delivered_on_attempt = True

    def deliveries_for(self, session: Session, iv: Intervention) -> list[Planned]:
        customer = session.get(Customer, (iv.tenant_id, iv.user_id))
        if not customer or not customer.email:
            raise Undeliverable("the user has no email address")
        return [Planned(url=f"mailto:{customer.email}",
                        body={"intervention_id": iv.id, "user_id": iv.user_id, "name": customer.name,
                              "message_body": iv.message_body or "", "subject": subject_of(session, iv.playbook_id)})]

    def send(self, claimed, secret: str, rt, now) -> Outcome:
        return transport(claimed, secret, rt, now)

    def withdraw(self, session: Session, iv: Intervention, *, was: str, now) -> None:
        """Mail that left cannot be called back."""


CHANNEL = Email()
