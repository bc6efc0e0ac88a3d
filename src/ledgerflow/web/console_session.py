"""The console's sign-in, sessions, CSRF and pages' rendering (internal).

- **Sign-in** takes an API token once and answers with a session cookie: ``HttpOnly`` (no
  script reads it), ``SameSite=Strict`` (no other site's page sends it), ``Secure`` when served
  over https (or through a trusted proxy that says so, or always with ``--cookie-secure``),
  scoped to ``/console``. The cookie holds a random secret; the journal keeps its
  hash and the token behind it (:meth:`~ledgerflow.operators.access.Tokens.sign_in`).
- **CSRF**: every form that changes something carries the session's CSRF token, compared in
  constant time before anything is done; the sign-in form carries one of its own (a
  double-submit cookie), so a foreign page cannot sign a browser in as someone else.
- **Rendering**: Jinja2 with autoescape on, and every value printed made inert first
  (:func:`inert`): a business key holding markup is shown as text, one holding a terminal
  escape or a bidirectional override is shown with that character as a visible escape.
  Every page goes out with a content security policy that allows no script at all. A value a
  form sends back (a hidden field) is not shown but carried: the ``field`` filter
  (:func:`field_value`) writes it so that the browser sends back exactly what was typed.
- **Form text** follows the API's one rule (:func:`checked_form`, on every console route): a
  field holding a NUL or a lone surrogate is refused (422) before a route reads it.
"""

from __future__ import annotations

import hmac
import re
import secrets
from typing import Annotated, Any

from fastapi import Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from ledgerflow.errors import NotAuthorizedError
from ledgerflow.model.names import check_storable, refused_character
from ledgerflow.operators.service import ScopedOperations, SignedIn
from ledgerflow.web.declare import INSECURE_PRINCIPAL, SESSION_KEY, server_of

SESSION_COOKIE = "lf_session"
SIGN_IN_COOKIE = "lf_sign_in"
CONSOLE_PATH = "/console"
SIGN_IN_PATH = f"{CONSOLE_PATH}/sign-in"
STATIC_PATH = f"{CONSOLE_PATH}/static"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


# C0 controls and DEL: a TAB or a line break among them. Written as character references, a
# browser reads them back unchanged (a raw CR would come back as LF). C1 controls stay raw: a
# reference to one is read as a Windows-1252 character instead.
_CONTROL = re.compile("[\x00-\x1f\x7f]")


class SignInRequiredError(Exception):
    """No session: the page answers with a redirect to the sign-in form."""


def inert(value: Any) -> Any:
    """A value as printed: control, bidirectional and line-breaking characters as visible
    escapes (``\\x1b``, ``\\u202e``); markup is escaped after this, by autoescape."""
    if value is None:
        return ""
    if isinstance(value, Markup):
        return value
    text = str(value)
    if not any(refused_character(c) for c in text):
        return text
    return "".join(
        (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
        if refused_character(c)
        else c
        for c in text
    )


def field_value(value: Any) -> Markup:
    """``value`` as a form field's value, to be sent back exactly as typed: markup escaped
    and the C0 controls (a TAB, a line break) as numeric character references, which a
    browser reads back as those very characters; nothing is made inert: nothing is shown."""
    escaped = str(escape("" if value is None else str(value)))
    return Markup(_CONTROL.sub(lambda found: f"&#{ord(found.group())};", escaped))


async def checked_form(request: Request) -> None:
    """Every field of a console form, held to the API's text rule (FastAPI has read the form
    already: this reads the same, parsed once)."""
    if request.method != "POST":
        return
    for name, value in (await request.form()).multi_items():
        if isinstance(value, str):
            check_storable(value, where=f"the {name} field")


templates = Environment(
    loader=PackageLoader("ledgerflow.web", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    finalize=inert,
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters["field"] = field_value


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    page = templates.get_template(name).render(request=request, **context)
    return HTMLResponse(page, status_code=status, headers=SECURITY_HEADERS)


def secure_cookies(request: Request) -> bool:
    """Whether the console's cookies go out ``Secure``: always with ``serve --cookie-secure``,
    else when the request came over https (directly, or through a proxy ``serve
    --forwarded-allow-ips`` trusts to say so in ``X-Forwarded-Proto``)."""
    return server_of(request).cookie_secure or request.url.scheme == "https"


def signed_in(request: Request) -> SignedIn:
    """Who holds this request's session (:class:`SignInRequiredError` when nobody does): the
    request guard looked it up before the body was read."""
    if server_of(request).insecure:
        return SignedIn(principal=INSECURE_PRINCIPAL, csrf_token=_insecure_csrf(request))
    session: SignedIn | None = request.scope.get(SESSION_KEY)
    if session is None:
        raise SignInRequiredError
    return session


def _insecure_csrf(request: Request) -> str:
    # Without sign-in there is no session to hold a CSRF token: the server holds one.
    token: str | None = getattr(request.app.state, "insecure_csrf", None)
    if token is None:
        token = secrets.token_urlsafe(32)
        request.app.state.insecure_csrf = token
    return token


def scoped(request: Request, session: SignedIn) -> ScopedOperations:
    return server_of(request).operations.acting_as(session.principal)


def check_csrf(session: SignedIn, sent: str | None) -> None:
    """A form that changes something must carry the session's CSRF token."""
    if not sent or not hmac.compare_digest(sent, session.csrf_token):
        raise NotAuthorizedError(
            "the form did not carry this session's CSRF token: a forged or stale request was "
            "refused (reload the page and try again)",
            actor=session.principal.name,
        )


def form_session(
    request: Request, csrf: Annotated[str | None, Form(max_length=200)] = None
) -> SignedIn:
    """The session of a form that changes something, once its CSRF token is checked: the
    first thing such a form's handler depends on, so a form without the token (or with
    another) is 403 before any other field of it is read or validated."""
    session = signed_in(request)
    check_csrf(session, csrf)
    return session


FormSession = Annotated[SignedIn, Depends(form_session)]


def sign_in_redirect() -> Response:
    return RedirectResponse(f"{CONSOLE_PATH}/sign-in", status_code=303, headers=SECURITY_HEADERS)


def set_session(response: Response, request: Request, cookie: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        cookie,
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request),
        path=CONSOLE_PATH,
    )
