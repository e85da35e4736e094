"""Signs a link to challenge-hook's player page as internal/platform/link.go verifies it.

Standard library only, so that it runs (and is tested, by sign_test.go) without CTFd:
  CHALLENGE_HOOK_LINK_KEY_FILE=key python3 sign.py <page URL> <namespace> <definition> <owner> [<expires>]
prints the link (expiring LIFETIME seconds from now unless <expires>, a Unix time, is given).
"""
import hashlib, hmac, os, sys, time
from urllib.parse import urlencode

LIFETIME = 120  # seconds: time to follow the redirect; the page refuses more than 5 minutes
MARK = "challenge-hook:"  # a CTFd challenge's connection info `challenge-hook:<definition>`


def definition_of(connection_info):
    """The ChallengeDefinition a challenge's connection info names, or None: not instanced."""
    info = (connection_info or "").strip()
    return info[len(MARK):].strip() or None if info.startswith(MARK) else None


def link_key(environ=os.environ):
    """The key of the file CHALLENGE_HOOK_LINK_KEY_FILE names, else CHALLENGE_HOOK_LINK_KEY, trimmed
    of surrounding whitespace as the component trims its key files."""
    if environ.get("CHALLENGE_HOOK_LINK_KEY_FILE"):
        with open(environ["CHALLENGE_HOOK_LINK_KEY_FILE"], "rb") as f:
            key = f.read().strip()
    else:
        key = environ.get("CHALLENGE_HOOK_LINK_KEY", "").encode().strip()
    if len(key) < 32:
        raise ValueError("challenge-hook: CHALLENGE_HOOK_LINK_KEY_FILE or CHALLENGE_HOOK_LINK_KEY must hold "
                         "the page's link key, 32 bytes or more")
    return key


def link(page_url, key, namespace, definition, owner, expires=None):
    expires = int(time.time()) + LIFETIME if expires is None else expires
    message = "\n".join(["challenge-hook/link/v1", namespace, definition, owner, str(expires)])
    sig = hmac.new(key, message.encode(), hashlib.sha256).hexdigest()
    query = urlencode({"ns": namespace, "def": definition, "owner": owner, "exp": expires, "sig": sig})
    return page_url.rstrip("/") + "/i/open?" + query


if __name__ == "__main__":
    page_url, namespace, definition, owner = sys.argv[1:5]
    print(link(page_url, link_key(), namespace, definition, owner, int(sys.argv[5]) if sys.argv[5:] else None))
