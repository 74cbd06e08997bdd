"""Which secrets may go where: `api_key_env` names a variable the user allowed, and its value is
sent only to a host approved for it.

The approvals live in the user's settings (`Settings.credential_hosts`: variable -> hosts), never in a
catalog, so a catalog (a registered model's bundled one included) can neither name another
variable (e.g. `AWS_SECRET_ACCESS_KEY`) nor send an allowed key elsewhere.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings, load_settings

OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
"""Where the openai client sends requests when a config has no base_url."""


def check_key_name(env_var: str | None, *, settings: Settings | None = None, file: str | None = None,
                   key: str = "api_key_env") -> None:
    """ConfigError unless `env_var` is None or one of the allowed key variables."""
    if not env_var:
        return
    allowed = (settings or load_settings()).credential_hosts
    if env_var not in allowed:
        raise ConfigError(file, f"{env_var!r} is not an allowed key variable (allowed: {', '.join(sorted(allowed))}; "
                          "allow another with ORCHESTRA_CREDENTIAL_HOSTS)", key=key)


def approved_secret(env_var: str | None, url: str | None, *, settings: Settings | None = None,
                    key: str = "api_key_env") -> str | None:
    """The value of `env_var` for a request to `url` (None: no variable, or it is unset).

    ConfigError when the variable is not allowed, or the host of `url` is not approved for it.
    """
    if not env_var:
        return None
    settings = settings or load_settings()
    check_key_name(env_var, settings=settings, key=key)
    value = os.environ.get(env_var) or None
    if value is None:
        return None  # nothing would be sent
    parts = urlsplit(url or OPENAI_DEFAULT_URL)
    host = (parts.hostname or "").lower()
    hosts = {h.lower() for h in settings.credential_hosts[env_var]}
    if host not in hosts and (parts.port is None or f"{host}:{parts.port}" not in hosts):
        raise ConfigError(None, f"{env_var} may be sent only to {', '.join(sorted(hosts))}, not to {host or url!r} "
                          "(approve the host in ORCHESTRA_CREDENTIAL_HOSTS, or set api_key_env: null for a server "
                          "without auth)", key=key)
    return value
