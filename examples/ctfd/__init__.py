"""challenge-hook for CTFd (README.md): a challenge whose connection info is
`challenge-hook:<definition>` shows a link to /challenge-hook/<id>, which signs a fresh link to the
player page of the player's team (user, in users mode) at each click and redirects there."""
import os

from flask import Blueprint, abort, redirect, url_for

import CTFd.api.v1.challenges as challenges_api
from CTFd.models import Challenges
from CTFd.utils.config import is_teams_mode
from CTFd.utils.decorators import authed_only
from CTFd.utils.user import get_current_team, get_current_user

from .sign import definition_of, link, link_key


class ShownChallenge:  # a challenge as its view shows it: its connection info is the route's URL
    def __init__(self, challenge):
        self.challenge = challenge
        self.connection_info = url_for("challenge_hook.open_page", challenge_id=challenge.id, _external=True)

    def __getattr__(self, name):
        return getattr(self.challenge, name)


def load(app):
    page_url = os.environ["CHALLENGE_HOOK_PAGE_URL"]
    namespace = os.environ.get("CHALLENGE_HOOK_NAMESPACE", "ctf")
    link_key()  # no key, or a short one: CTFd stops here, not at a player's click
    blueprint, render_template = Blueprint("challenge_hook", __name__), challenges_api.render_template

    @blueprint.route("/challenge-hook/<int:challenge_id>")
    @authed_only
    def open_page(challenge_id):
        # CTFd's own checks, as for the challenge's view: hidden, locked, prerequisites, CTF time, team
        view = challenges_api.Challenge().get(challenge_id)
        if not isinstance(view, dict):
            return view  # CTFd's redirect (to log in, to join a team)
        definition = definition_of(Challenges.query.filter_by(id=challenge_id).first().connection_info)
        teams = is_teams_mode()
        account = get_current_team() if teams else get_current_user()
        if definition is None or view["data"]["type"] == "hidden" or account is None:
            abort(404 if definition is None else 403)
        owner = ("team-%d" if teams else "user-%d") % account.id
        return redirect(link(page_url, link_key(), namespace, definition, owner))

    def render_with_link(template, **context):  # the challenges API renders a challenge's view with it
        if context.get("challenge") is not None and definition_of(context["challenge"].connection_info):
            context["challenge"] = ShownChallenge(context["challenge"])
        return render_template(template, **context)

    challenges_api.render_template = render_with_link
    app.register_blueprint(blueprint)
