"""`serve --allow-origin` takes only values a browser's Origin header can hold (#51): one no Origin can ever equal
('not a url', a path, the default port written out, 'null') is refused at start with one line and exit status 1,
instead of starting a server whose CORS allows nothing."""

import pytest

from clinicode.config import ServeConfig
from clinicode.errors import ConfigError

from helpers import fails


@pytest.mark.parametrize("origin, why", [
    ("not a url", "not an http:// or https:// origin"),
    ("coding.example.org", "not an http:// or https:// origin"),
    ("ftp://coding.example.org", "not an http:// or https:// origin"),
    ("https://coding.example.org/app", "an origin has no path, query or fragment"),
    ("https://coding.example.org?x=1", "an origin has no path, query or fragment"),
    ("https://coding.example.org:443", "browsers leave out the default port 443"),
    ("http://127.0.0.1:99999", "its port is not a number from 0 to 65535"),
    ("https://user@coding.example.org", "it names no host (or has user information)"),
    ("null", "'null' is what sandboxed and file:// pages send"),
])
def test_an_origin_no_browser_can_send_is_refused_in_one_line(tiny_run, origin, why):
    with pytest.raises(ConfigError, match="--allow-origin"):
        ServeConfig(allow_origins=("https://fine.example.org", origin))
    res = fails(["serve", "--checkpoint", tiny_run, "--allow-origin", origin], f"--allow-origin {origin!r}: {why}")
    assert "scheme://host[:port] such as https://coding.example.org, or '*' for any" in res.stderr


@pytest.mark.parametrize("origin", ["*", "https://coding.example.org", "https://coding.example.org/",
                                    "http://127.0.0.1:8501", "HTTPS://Coding.Example.org", "http://[::1]:8080"])
def test_origins_as_browsers_send_them_are_accepted(origin):
    assert ServeConfig(allow_origins=(origin,)).allow_origins == (origin,)
