"""Opt-out: the signed one-click unsubscribe link of every email (decisions §8, RFC 8058).
No bearer: the signed token is the credential."""

from __future__ import annotations

import html

from flask import Response
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


def _unsubscribe(call: Call) -> optout.Unsubscribe:
    return optout.unsubscribe(call.session, call.rt.settings.secret_key, call.query.token, now=call.now)


@api.route("GET", "/api/unsubscribe", access="public", query=UnsubscribeQuery, errors=(400, 404), atomic=True,
           summary="Follow an unsubscribe link: opt the user out of the channel; answers an HTML page")
def get_unsubscribe(call: Call):
    done = _unsubscribe(call)
    return Response(_page(done.channel), mimetype="text/html")


@api.route("POST", "/api/unsubscribe", access="public", query=UnsubscribeQuery, response=Unsubscribed,
           errors=(400, 404),
           summary="One-click unsubscribe (RFC 8058 `List-Unsubscribe=One-Click`): opt the user out")
def post_unsubscribe(call: Call):
    done = _unsubscribe(call)
    return Unsubscribed(unsubscribed=True, channel=done.channel)


def _page(channel: str) -> str:
    what = "these emails" if channel == "email" else f"messages on {html.escape(channel)}"
    return ("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Unsubscribed</title></head>\n"
            f"<body><h1>You are unsubscribed</h1><p>You will not receive {what} any more.</p></body></html>\n")
