"""Opt-out: the signed one-click unsubscribe link of every email (docs/channels.md,
Unsubscribe). No bearer: the signed token is the credential.

Following the link (GET) only shows a page whose button POSTs to the same URL: mail
scanners and link previews follow GET links, and must not unsubscribe anyone (RFC 8058).
The POST opts out, for the page's button and for a mail client's one-click POST alike."""

from __future__ import annotations

import html

from flask import Response, request
from pydantic import Field

from cs_daemon.channels import optout
from cs_daemon.schemas import Wire

from ..api import Api, Call

api = Api("Opt-out")


class UnsubscribeQuery(Wire):
    token: str = Field(min_length=1, max_length=4096)


class Unsubscribed(Wire):
    unsubscribed: bool
    channel: str


@api.route("GET", "/api/unsubscribe", access="public", query=UnsubscribeQuery, errors=(400, 404),
           summary="Follow an unsubscribe link: an HTML page asking to confirm, whose button POSTs "
                   "(nothing changes on GET)")
def get_unsubscribe(call: Call):
    wanted, customer = optout.look_up(call.session, call.rt.settings.secret_key, call.query.token)
    done = optout.is_opted_out(customer, wanted.channel)
    return Response(_page(wanted.channel, asking=not done), mimetype="text/html")


@api.route("POST", "/api/unsubscribe", access="public", query=UnsubscribeQuery, response=Unsubscribed,
           errors=(400, 404),
           summary="Unsubscribe: the confirmation page's button, or a mail client's one-click POST "
                   "(RFC 8058 `List-Unsubscribe=One-Click`); answers HTML to a browser, JSON otherwise")
def post_unsubscribe(call: Call):
    done = optout.unsubscribe(call.session, call.rt.settings.secret_key, call.query.token, now=call.now)
    if request.accept_mimetypes.best_match(["application/json", "text/html"]) == "text/html":
        return Response(_page(done.channel, asking=False), mimetype="text/html")
    return Unsubscribed(unsubscribed=True, channel=done.channel)


def _page(channel: str, *, asking: bool) -> str:
    what = "these emails" if channel == "email" else f"messages on {html.escape(channel)}"
    if asking:
        # no action attribute: the form posts to this very URL, token included
        title, body = "Unsubscribe", (
            f"<h1>Unsubscribe?</h1><p>You will not receive {what} any more.</p>\n"
            '<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click">'
            '<button type="submit">Unsubscribe</button></form>')
    else:
        title, body = "Unsubscribed", f"<h1>You are unsubscribed</h1><p>You will not receive {what} any more.</p>"
    return ("<!doctype html>\n<html><head><meta charset=\"utf-8\">"
            "<meta name=\"robots\" content=\"noindex\">"
            f"<title>{title}</title></head>\n<body>{body}</body></html>\n")
