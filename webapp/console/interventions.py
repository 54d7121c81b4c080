"""The review queue, the interventions and escalations lists, an intervention's detail,
and the forms that approve, pause, reject, flag, roll back, edit, handle and delegate
(each through the API endpoint of the same name)."""

from __future__ import annotations

from flask import Blueprint, abort, request, url_for

from cs_daemon.errors import NotFound, ServiceError
from cs_daemon.interventions import search, service
from cs_daemon.interventions.models import Intervention
from cs_daemon.interventions.states import available

from . import gateway, web

IV = "/api/interventions/{intervention_id}"
ESC = "/api/escalations/{escalation_id}"
# form name -> (method, API path, the form fields that make its body)
ACTIONS = {
    "approve": ("PUT", IV + "/approve", ()),
    "pause": ("PUT", IV + "/pause", ()),
    "reject": ("PUT", IV + "/reject", ("reason",)),
    "flag": ("PUT", IV + "/flag", ("reason",)),
    "rollback": ("PUT", IV + "/rollback", ("reason",)),
    "message": ("PATCH", IV, ("message_body",)),
}
ESCALATION_ACTIONS = {
    "handle": ("PUT", ESC + "/handle", ("action_taken", "outcome")),
    "delegate": ("PUT", ESC + "/delegate", ("channel",)),
}
CHANNELS = ("email", "in_app", "webhook", "crm")
TRACE = ("GET", IV + "/trace")   # served once decisions keep a trace


def install(bp: Blueprint) -> None:
    bp.add_url_rule("/review", "review", web.page(review))
    bp.add_url_rule("/interventions", "interventions", web.page(listing))
    bp.add_url_rule("/interventions/<intervention_id>", "intervention", web.page(detail))
    bp.add_url_rule("/interventions/<intervention_id>/status", "intervention_status", web.page(status))
    bp.add_url_rule("/interventions/<intervention_id>/<verb>", "intervention_action", web.action(act),
                    methods=["POST"])
    bp.add_url_rule("/escalations/<escalation_id>/<verb>", "escalation_action", web.action(act_escalation),
                    methods=["POST"])


class Item:
    """An intervention as a page shows it: the row, its user and playbook names, and the
    controls the signed-in caller is offered on it."""

    def __init__(self, ctx: web.Ctx, iv, people: dict, playbooks: dict):
        self.iv = iv
        self.customer = people.get(iv.user_id)
        self.playbook = playbooks.get(iv.playbook_id, "—") if iv.playbook_id else "—"
        offered = available(iv.status)
        table = ESCALATION_ACTIONS if iv.channel == "escalate" else ACTIONS
        self.controls = {name for name, (method, path, _) in table.items()
                         if (name in offered or name == "message" and "edit" in offered)
                         and ctx.may_change(iv.test, method, path)}

    @property
    def who(self) -> str:
        c = self.customer
        return (c.name or c.email or c.id) if c is not None else self.iv.user_id

    @property
    def in_flight(self) -> bool:
        return self.iv.status in ("approved", "sent")


def _items(ctx: web.Ctx, rows) -> list[Item]:
    people = search.people(ctx.session, [iv.user_id for iv in rows])
    playbooks = search.playbook_names(ctx.session)
    return [Item(ctx, iv, people, playbooks) for iv in rows]


def review(ctx: web.Ctx):
    found = search.find(ctx.session, status="planned", test=ctx.test_filter, cursor=request.args.get("cursor"))
    return ctx.render("console/review.html", items=_items(ctx, found.items), next_cursor=found.next_cursor)


def listing(ctx: web.Ctx):
    kind = "escalations" if request.args.get("kind") == "escalations" else "interventions"
    args = {k: request.args.get(k) or None for k in ("status", "channel", "playbook")}
    found = search.find(ctx.session, escalations=kind == "escalations", status=args["status"],
                        channel=args["channel"], playbook_id=args["playbook"], test=ctx.test_filter,
                        cursor=request.args.get("cursor"))
    statuses = service.ESCALATION_STATUSES if kind == "escalations" else service.INTERVENTION_STATUSES
    older = found.next_cursor and url_for("console.interventions", cursor=found.next_cursor,
                                          **({"kind": kind} if kind == "escalations" else {}),
                                          **{k: v for k, v in args.items() if v})
    return ctx.render("console/interventions.html", kind=kind, items=_items(ctx, found.items), older=older, args=args, statuses=statuses, channels=CHANNELS,
                      playbooks=search.playbook_names(ctx.session))


def _one(ctx: web.Ctx, intervention_id: str) -> Item:
    iv = ctx.session.get(Intervention, intervention_id)
    if iv is None:   # the API's words, as every refusal in the console
        raise NotFound("intervention not found")
    return _items(ctx, [iv])[0]


def detail(ctx: web.Ctx, intervention_id: str):
    item = _one(ctx, intervention_id)
    trace = None
    if gateway.has(*TRACE) and ctx.can(*TRACE):
        try:
            trace = ctx.api(*TRACE, intervention_id=intervention_id).get("trace")
        except ServiceError:
            trace = None          # none kept for this one: no section at all
    return ctx.render("console/intervention.html", item=item, sent=search.deliveries_of(ctx.session, item.iv.id),
                      trace=trace, channels=CHANNELS)


def status(ctx: web.Ctx, intervention_id: str):
    """The status badge alone: a card polls it while its intervention is on its way."""
    return ctx.render("console/_status.html", item=_one(ctx, intervention_id))


def _body(fields: tuple[str, ...]) -> dict | None:
    if not fields:
        return None
    return {f: request.form[f] for f in fields if request.form.get(f) not in (None, "")}


def act(ctx: web.Ctx, intervention_id: str, verb: str):
    return _act(ctx, ACTIONS, verb, intervention_id, intervention_id=intervention_id)


def act_escalation(ctx: web.Ctx, escalation_id: str, verb: str):
    return _act(ctx, ESCALATION_ACTIONS, verb, escalation_id, escalation_id=escalation_id)


def _act(ctx: web.Ctx, actions: dict, verb: str, card_id: str, **path_ids: str):
    """`verb` of `actions` through the API (404 for a verb it does not have), then the card
    or the page of `card_id`."""
    if verb not in actions:
        abort(404)
    method, path, fields = actions[verb]
    ctx.api(method, path, body=_body(fields), **path_ids)
    return _done(ctx, card_id, verb)


def _done(ctx: web.Ctx, intervention_id: str, verb: str):
    if web.is_htmx():
        ctx.session.flush()
        ctx.session.expire_all()
        return ctx.render("console/_card.html", item=_one(ctx, intervention_id), done=verb)
    return web.back(url_for("console.intervention", intervention_id=intervention_id), done=verb)
